"""Scorers backed by detectors whose weights ship inside their wheels (nothing is downloaded at run time).

* ``text`` – burnt-in text (captions, watermarks, overlays): RapidOCR's PP-OCRv4 text *detector* (an ONNX
  model in the ``rapidocr-onnxruntime`` wheel, run by onnxruntime) on a few evenly spaced frames. Only the
  detector runs: whether text is on screen is the question, not what it says, and recognition would cost
  several times more per box.
* ``faces`` – faces for privacy review: OpenCV's frontal-face Haar cascade (the XML in the
  ``opencv-python-headless`` wheel, ``cv2.data.haarcascades``) on the same kind of sample.

Both report the share of sampled frames with a detection, the most detections in one frame and the
largest share of a frame they cover, so a rank can tell a corner watermark from a full-screen caption.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from pipeline.annotate.base import Annotator, AnnotatorInput
from pipeline.annotate.source import EpisodeSource
from pipeline.config.types import FrozenModel
from pipeline.steps.base import Resources

log = logging.getLogger(__name__)


def sample_indices(count: int, wanted: int) -> list[int]:
    """``wanted`` evenly spaced positions in ``range(count)`` (all of them when there are fewer)."""
    if count <= wanted:
        return list(range(count))
    return sorted({int(x) for x in np.rint(np.linspace(0, count - 1, wanted))})


def _summary(prefix: str, per_frame: list[list[float]], sampled: int) -> dict[str, Any]:
    """Keys shared by the detectors: ``per_frame`` holds each sampled frame's detection areas (fractions)."""
    with_hits = sum(1 for areas in per_frame if areas)
    return {
        f"{prefix}.frame_fraction": round(with_hits / max(1, sampled), 4),
        f"{prefix}.count_max": max((len(a) for a in per_frame), default=0),
        f"{prefix}.area_fraction_max": round(max((sum(a) for a in per_frame), default=0.0), 4),
        f"{prefix}.frames_sampled": sampled,
    }


class SampledDetector(Annotator):
    """A detector run on ``params.frames`` evenly spaced working frames; subclasses load it in ``setup`` and
    say what it finds in one frame (:meth:`areas`)."""

    inputs = frozenset({AnnotatorInput.VIDEO})
    _model: Any = None  # what ``setup`` loads

    def areas(self, luma: np.ndarray) -> list[float]:
        """The share of the frame each detection covers."""
        raise NotImplementedError

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        if self._model is None:
            self.setup()
        luma = source.frames().luma
        picks = sample_indices(len(luma), self.params.frames)
        return _summary(self.name, [self.areas(luma[i]) for i in picks], len(picks))


class TextParams(FrozenModel):
    frames: int = Field(default=4, ge=1, le=64, description="Evenly spaced frames the detector reads.")
    # The detector's own default box score; lower finds faint text and more false boxes on texture.
    box_threshold: float = Field(default=0.5, gt=0, lt=1, description="Least detector score of a text box.")
    # The working frames are 320 wide: detecting at that size keeps 12-pixel captions and costs a fifth
    # of RapidOCR's default (the short side scaled up to 736).
    detect_side_px: int = Field(default=320, ge=32, le=2048, description="Longest side the detector sees.")


class TextPresence(SampledDetector):
    """Burnt-in text by RapidOCR's PP-OCRv4 ONNX detector (shipped in its wheel), on sampled frames."""

    name = "text"
    Params: ClassVar[type[FrozenModel]] = TextParams
    # onnxruntime with one intra-op thread stays on the one core the step gives a worker; the detector's
    # session and arena hold about 300 MB.
    default_resources: ClassVar[Resources] = Resources(cpus=1.0, memory_bytes=1 << 30)

    def setup(self) -> None:
        from rapidocr_onnxruntime import RapidOCR

        self._model = RapidOCR(
            intra_op_num_threads=1,
            inter_op_num_threads=1,
            det_limit_side_len=self.params.detect_side_px,
            det_limit_type="max",
            det_box_thresh=self.params.box_threshold,
        )

    def areas(self, luma: np.ndarray) -> list[float]:
        image = np.repeat(luma[:, :, None], 3, axis=2)
        boxes, _elapsed = self._model(image, use_det=True, use_cls=False, use_rec=False)
        return [_quad_area(b) / luma.size for b in (boxes or [])]


def _quad_area(points: Any) -> float:
    """Area of a detector's quadrilateral (shoelace formula)."""
    p = np.asarray(points, dtype=np.float64)
    x, y = p[:, 0], p[:, 1]
    return float(abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))) / 2)


class FaceParams(FrozenModel):
    frames: int = Field(default=8, ge=1, le=64, description="Evenly spaced frames the detector reads.")
    # OpenCV's documented starting point: fewer neighbours find more faces and more false ones.
    min_neighbors: int = Field(default=5, ge=1, le=50, description="Overlapping hits a face needs.")
    # A face narrower than 20 px in a 320-wide frame is not identifiable, and the cascade's own window is
    # 24 px: smaller faces are below what it was trained on.
    min_face_px: int = Field(default=24, ge=8, le=512, description="Smallest face side searched for.")


class Faces(SampledDetector):
    """Faces by OpenCV's frontal-face Haar cascade (shipped in its wheel), on sampled frames."""

    name = "faces"
    Params: ClassVar[type[FrozenModel]] = FaceParams
    #: The cascade file of ``cv2.data.haarcascades`` this annotator loads.
    CASCADE = "haarcascade_frontalface_default.xml"

    def setup(self) -> None:
        import cv2

        cv2.setNumThreads(1)  # one core per worker, as the step's resources say
        path = cv2.data.haarcascades + self.CASCADE  # type: ignore[attr-defined]  # not in cv2's stubs
        cascade = cv2.CascadeClassifier(path)
        if cascade.empty():
            raise RuntimeError(f"OpenCV could not load {path}")
        self._model = cascade

    def areas(self, luma: np.ndarray) -> list[float]:
        side = self.params.min_face_px
        found = self._model.detectMultiScale(
            np.ascontiguousarray(luma), minNeighbors=self.params.min_neighbors, minSize=(side, side)
        )
        return [float(w * h) / luma.size for (_x, _y, w, h) in found]
