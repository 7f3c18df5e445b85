"""Model-backed annotators: a backend interface for a model loaded from a local path, and one adapter.

A :class:`ModelBackend` loads weights from a path (never from a hub: workers have no network) and maps a
batch of inputs to a batch of outputs. :class:`ModelAnnotator` does the episode-level work around it: load
once per worker in ``setup()``, sample frames, batch them, and reduce the per-frame outputs to annotations;
its ``resources`` come from its params (``gpus`` for a captioner on a GPU worker).

The concrete adapter, :class:`NpzLinearBackend`, is a softmax-linear classifier over shrunk luma frames
stored as a ``.npz`` (``weights`` (k, h*w), ``bias`` (k,), ``labels`` (k,), ``input_hw`` (2,)). It is small
enough for a test to build, and exercises the same path an ONNX or torch backend would.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from pipeline.annotate.base import Annotator, AnnotatorError, AnnotatorInput
from pipeline.annotate.imageops import area_resize
from pipeline.annotate.source import EpisodeSource
from pipeline.config.types import FrozenModel
from pipeline.steps.base import Resources


class ModelBackend(ABC):
    """A model loaded from a local file: ``load`` once, then ``predict`` batches."""

    @abstractmethod
    def load(self, path: Path) -> None:
        """Load the weights at ``path``; raise :class:`AnnotatorError` naming the path if they are unusable."""

    @abstractmethod
    def predict(self, batch: np.ndarray) -> np.ndarray:
        """Outputs for a batch of inputs (first axis = batch)."""


class NpzLinearBackend(ModelBackend):
    """Softmax over ``weights @ x + bias`` for flattened luma frames in [0, 1]."""

    REQUIRED = ("weights", "bias", "labels", "input_hw")

    def __init__(self) -> None:
        self.weights = np.zeros((0, 0))
        self.bias = np.zeros(0)
        self.labels: list[str] = []
        self.input_hw = (0, 0)

    def load(self, path: Path) -> None:
        try:
            with np.load(path, allow_pickle=False) as data:
                missing = [k for k in self.REQUIRED if k not in data.files]
                if missing:
                    raise AnnotatorError(
                        "model", f"{path}: missing arrays {missing}; required: {list(self.REQUIRED)}"
                    )
                self.weights = np.asarray(data["weights"], dtype=np.float32)
                self.bias = np.asarray(data["bias"], dtype=np.float32)
                self.labels = [str(x) for x in data["labels"].tolist()]
                h, w = (int(x) for x in data["input_hw"].tolist())
        except (OSError, ValueError) as exc:
            raise AnnotatorError("model", f"cannot load {path}: {exc}") from None
        self.input_hw = (h, w)
        k = len(self.labels)
        if self.weights.shape != (k, h * w) or self.bias.shape != (k,):
            raise AnnotatorError(
                "model",
                f"{path}: weights {self.weights.shape} / bias {self.bias.shape} do not fit {k} labels over "
                f"{h}x{w} inputs; expected ({k}, {h * w}) and ({k},)",
            )

    def predict(self, batch: np.ndarray) -> np.ndarray:
        logits = batch.reshape(len(batch), -1).astype(np.float32) @ self.weights.T + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return np.asarray(exp / exp.sum(axis=1, keepdims=True))


class ModelParams(FrozenModel):
    model_path: str = Field(min_length=1, description="Local path of the model file (no hub downloads).")
    # 16 frames per episode is enough for an episode-level label and keeps a CPU model fast.
    frames: int = Field(default=16, ge=1, le=4096, description="Frames sampled per episode.")
    batch_size: int = Field(default=16, ge=1, le=4096, description="Frames per predict call.")
    gpus: float = Field(default=0.0, ge=0, le=8, description="GPUs one worker needs (a VLM needs 1).")
    # A linear model over small frames fits in 1 GiB with the decoded episode; a VLM declares more.
    memory_bytes: int = Field(default=1 << 30, gt=0, description="Memory one worker needs.")


class ModelAnnotator(Annotator):
    """An annotator around a :class:`ModelBackend`; subclasses choose the backend and the reduction."""

    inputs = frozenset({AnnotatorInput.VIDEO})
    Params: ClassVar[type[FrozenModel]] = ModelParams
    backend_class: ClassVar[type[ModelBackend]]

    def __init__(self, version: str, params: Any = None) -> None:
        super().__init__(version, params)
        self.backend: ModelBackend | None = None
        self.model_sha256: str | None = None

    @property
    def resources(self) -> Resources:
        """Per instance: the params say what the model needs."""
        return Resources(cpus=1.0, memory_bytes=int(self.params.memory_bytes), gpus=float(self.params.gpus))

    def setup(self) -> None:
        path = Path(self.params.model_path).expanduser()
        if not path.is_file():
            raise AnnotatorError(self.name, f"model file {path} does not exist")
        backend = self.backend_class()
        backend.load(path)
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
        self.backend, self.model_sha256 = backend, digest.hexdigest()

    def predict_frames(self, frames: np.ndarray) -> np.ndarray:
        if self.backend is None:
            self.setup()
        assert self.backend is not None
        size = self.params.batch_size
        return np.concatenate(
            [self.backend.predict(frames[i : i + size]) for i in range(0, len(frames), size)]
        )


class FrameClassifier(ModelAnnotator):
    """Episode-level label from a frame classifier: the mean of per-frame class probabilities."""

    name = "frame_classifier"
    backend_class = NpzLinearBackend

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        if self.backend is None:
            self.setup()
        backend = self.backend
        assert isinstance(backend, NpzLinearBackend)
        luma = source.frames().luma
        picks = np.unique(
            np.linspace(0, len(luma) - 1, min(self.params.frames, len(luma))).round().astype(int)
        )
        h, w = backend.input_hw
        batch = np.stack([area_resize(luma[i], h, w) / 255.0 for i in picks])
        probs = self.predict_frames(batch).mean(axis=0)
        top = int(np.argmax(probs))
        return {
            "frame_classifier.label": backend.labels[top],
            "frame_classifier.confidence": round(float(probs[top]), 4),
            "frame_classifier.probabilities": {
                label: round(float(p), 4) for label, p in zip(backend.labels, probs, strict=True)
            },
            "frame_classifier.model_sha256": self.model_sha256,
        }
