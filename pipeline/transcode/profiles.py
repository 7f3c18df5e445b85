"""From a training profile (:class:`~pipeline.config.TranscodeOptions`) to libx264 settings and the GOP it
must produce.

* ``vla`` / ``world_model``: closed GOPs of ``gop_frames`` frames, an IDR then P-frames only (Foxglove
  cannot show B-frames), every frame a reference: a frame depends on every frame before it in its GOP.
* ``random_access``: the dependency-decoupled layout measured in MEASURED.md: an IDR, ``gop_frames - 2``
  non-reference B-frames, then a P anchor; ``b-adapt=0`` fixes the pattern, ``b-pyramid=none`` keeps the
  B-frames non-reference, ``ref=1`` makes the P predict from the IDR only, ``weightb=0`` drops weighted
  bi-prediction. Any frame then costs at most its two anchors plus itself to decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from pipeline.config import TrainingProfile, TranscodeOptions
from pipeline.media.x264 import deterministic_params


@dataclass(frozen=True)
class EncoderSettings:
    """Everything libx264 is told, resolved from the profile; picklable for encoder processes."""

    profile: TrainingProfile
    gop_frames: int
    bframes: int
    preset: str
    crf: int | None
    qp: int | None
    max_pixels: int
    entropy_coder: str = "cabac"

    @classmethod
    def from_options(cls, options: TranscodeOptions) -> EncoderSettings:
        return cls(
            profile=options.profile,
            gop_frames=options.gop_frames,
            bframes=options.bframes,
            preset=options.preset,
            crf=options.crf,
            qp=options.qp,
            max_pixels=options.max_pixels,
            entropy_coder=options.entropy_coder,
        )

    @property
    def decoupled(self) -> bool:
        """True for the dependency-decoupled (non-reference B-frame) layout."""
        return self.profile is TrainingProfile.RANDOM_ACCESS

    def x264_params(self) -> str:
        params = [
            f"keyint={self.gop_frames}",
            f"min-keyint={self.gop_frames}",
            # A keyframe every gop_frames exactly, never where x264 sees a scene cut: the GOP audit and the
            # sample reader rely on the fixed interval.
            "scenecut=0",
            f"bframes={self.bframes}",
            # always explicit: presets differ (ultrafast turns CABAC off), the profile decides
            f"cabac={int(self.entropy_coder == 'cabac')}",
            # byte-identical reruns (random_access under CRF would otherwise depend on stale heap bytes)
            *deterministic_params(self.bframes),
        ]
        if self.decoupled:
            params += ["b-adapt=0", "b-pyramid=none", "ref=1", "weightb=0"]
        return ":".join(params)

    def x264_options(self) -> dict[str, str]:
        """The ``options`` of PyAV's libx264 encoder."""
        options = {"preset": self.preset, "x264-params": self.x264_params()}
        if self.qp is not None:
            options["qp"] = str(self.qp)
        else:
            options["crf"] = str(self.crf)
        return options

    def describe(self) -> dict[str, str]:
        """String map for the episode's metadata record."""
        return {
            "profile": self.profile.value,
            "gop_frames": str(self.gop_frames),
            "bframes": str(self.bframes),
            "preset": self.preset,
            "rate_control": f"qp {self.qp}" if self.qp is not None else f"crf {self.crf}",
            "x264_params": self.x264_params(),
        }


def fit_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """The output size: the input size scaled down (aspect kept) until it has at most ``max_pixels``,
    both sides even (yuv420p halves them)."""
    if width * height > max_pixels:
        scale = (max_pixels / (width * height)) ** 0.5
        width, height = int(width * scale), int(height * scale)
    return max(2, width - width % 2), max(2, height - height % 2)


def expected_letters(frames: int, settings: EncoderSettings) -> str:
    """The frame letters (see :func:`pipeline.transcode.h264.frame_letter`) the profile must produce, in
    display order, for a stream of ``frames`` frames."""
    out = []
    g = settings.gop_frames
    for start in range(0, frames, g):
        size = min(g, frames - start)
        if settings.decoupled and size > 1:
            out.append("I" + "b" * (size - 2) + "P")
        else:
            out.append("I" + "P" * (size - 1))
    return "".join(out)


def frame_rate(rate_hz: float) -> Fraction:
    """A camera rate as a fraction (29.97 and the like become n/1001)."""
    return Fraction(rate_hz).limit_denominator(1001)
