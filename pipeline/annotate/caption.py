"""The VLM captioner: an image-to-text model from transformers captions a few sampled frames of each clip.

Why it is built this way:

* **A local directory, never a hub.** ``model_path`` is what ``save_pretrained`` wrote (weights, config,
  tokenizer, image processor). Workers have no network, so everything loads with ``local_files_only``; a
  value that is not a directory (a hub id such as ``Salesforce/blip-image-captioning-base``) is refused
  with how to make a local copy, instead of a download that hangs and times out.
* **An optional extra.** transformers needs torch, whose Linux wheel on PyPI is the CUDA build (GBs with
  its nvidia-* libraries), so both are the ``vlm`` extra, not the project's venv. Without them ``setup``
  raises an :class:`AnnotatorError` naming the extra; the annotate step logs it, records it on each
  episode as this annotator's failure (a warning: the step is non-critical) and runs the other annotators.
* **Models that caption from pixels alone**: whatever ``AutoModelForImageTextToText`` loads and whose
  ``generate`` takes ``pixel_values`` only (VisionEncoderDecoder pairs such as ViT + GPT-2, BLIP, GIT).
  Decoding is greedy or beam search, never sampling, so a caption is a function of model and frames.
* **Sized by the worker's resources.** It runs on CUDA when torch sees a device, else on the CPU with as
  many threads as the worker was granted cores. The batch size comes from the memory the worker was given
  (:meth:`Annotator.grant`: the annotate step's resources, raised to this annotator's ``memory_bytes`` and
  ``gpus``; on a GPU, the device's memory times the granted share of it), less the loaded weights and a
  reserve, over what one frame costs (``frame_memory_bytes``). On a deployment with GPU hosts the vendor
  puts the annotate step on the ``gpu`` pool and gives the captioner ``gpus: 1``, so Ray places it there.

Frames are sampled as the detectors sample them (:func:`pipeline.annotate.detectors.sample_indices`) and
decoded once more in colour (:meth:`EpisodeSource.rgb_frames`). The episode's caption is the middle
sampled frame's; every sampled frame's caption is kept beside it, with the model's name, type and digest.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import ByteSize, Field

from pipeline.annotate.base import Annotator, AnnotatorError, AnnotatorInput
from pipeline.annotate.detectors import sample_indices
from pipeline.annotate.source import EpisodeSource
from pipeline.config.types import FrozenModel, PositiveBytes
from pipeline.steps.base import Resources

log = logging.getLogger(__name__)

_MIB = 1 << 20
#: Memory a worker keeps for what is not the captioner's batch: the decoded episode (512 luma frames of
#: 320x240 are 39 MB), the other annotators' models (RapidOCR's session holds about 300 MB), and on a GPU
#: the CUDA context (a few hundred MB).
RESERVED_BYTES = 512 * _MIB
#: The largest batch the memory can ask for; past this a captioner's throughput no longer rises.
MAX_BATCH = 64
#: How to get the packages this annotator needs.
EXTRA_HINT = (
    "install Sluice's `vlm` extra (`uv sync --extra vlm`, `pip install 'sluice[vlm]'`, or the venv "
    "`make test-vlm` builds)"
)


class CaptionParams(FrozenModel):
    model_path: str = Field(
        min_length=1,
        description="Local directory of the model as save_pretrained wrote it (hub ids are refused).",
    )
    # Four frames say what a clip shows and cost four generate rows; a model that captions well is slow.
    frames: int = Field(default=4, ge=1, le=64, description="Evenly spaced frames captioned per clip.")
    max_new_tokens: int = Field(default=24, ge=1, le=256, description="Longest caption, in tokens.")
    num_beams: int = Field(default=1, ge=1, le=8, description="Beam search width (1: greedy).")
    batch_size: int | None = Field(
        default=None, ge=1, le=1024, description="Frames per generate call; unset: from the worker's memory."
    )
    # A base-size captioner (BLIP-base, 384 px) holds a few hundred MB of activations per image in fp32.
    frame_memory_bytes: PositiveBytes = Field(
        default=ByteSize(256 * _MIB), description="Memory one frame of a batch takes."
    )
    # BLIP-base's weights are 1 GB in fp32; with a batch of 8 and the reserve, 4 GiB.
    memory_bytes: PositiveBytes = Field(
        default=ByteSize(4 << 30), description="Memory one worker needs (raises the step's)."
    )
    gpus: float = Field(
        default=0.0, ge=0, le=8, description="GPUs one worker needs: 1 where the step runs on the gpu pool."
    )


def caption_batch_size(budget_bytes: int, model_bytes: int, frame_bytes: int, frames: int) -> int:
    """Frames per generate call that fit ``budget_bytes`` beside the weights and :data:`RESERVED_BYTES`:
    at least 1, at most the frames of a clip and :data:`MAX_BATCH`."""
    fits = (budget_bytes - model_bytes - RESERVED_BYTES) // max(1, frame_bytes)
    return int(max(1, min(frames, MAX_BATCH, fits)))


def directory_sha256(path: Path) -> str:
    """Digest of every file directly in ``path`` (names and contents, in name order): the model's identity."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.iterdir() if p.is_file()):
        digest.update(file.name.encode() + b"\0")
        with open(file, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


class Captioner(Annotator):
    """Captions sampled frames with a local transformers image-to-text model."""

    name = "caption"
    inputs = frozenset({AnnotatorInput.VIDEO})
    Params: ClassVar[type[FrozenModel]] = CaptionParams

    def __init__(self, version: str, params: Any = None) -> None:
        super().__init__(version, params)
        self._loaded: dict[str, Any] | None = None
        self._load_error: AnnotatorError | None = None
        self.batch_size = 0  # frames per generate call, known after setup
        self.generate_calls = 0

    @property
    def resources(self) -> Resources:
        """Per instance: the params say what the model needs."""
        return Resources(cpus=1.0, memory_bytes=int(self.params.memory_bytes), gpus=float(self.params.gpus))

    def setup(self) -> None:
        """Load the model once; a load that failed fails again at once (it is not retried per episode)."""
        if self._loaded is not None:
            return
        if self._load_error is not None:
            raise AnnotatorError(self.name, self._load_error.detail)
        try:
            self._loaded = self._load()
        except AnnotatorError as exc:
            self._load_error = exc
            raise

    def _load(self) -> dict[str, Any]:
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise AnnotatorError(
                self.name, f"needs transformers and torch, and {exc.name} is not installed: {EXTRA_HINT}"
            ) from None
        path = Path(self.params.model_path).expanduser()
        if not path.is_dir():
            raise AnnotatorError(
                self.name,
                f"model_path {self.params.model_path!r} is not a local directory. Hub ids are not fetched "
                "(workers have no network): download the model where there is network, save it with "
                "save_pretrained (model, tokenizer and image processor) and give that directory",
            )
        transformers.utils.logging.disable_progress_bar()
        granted = self.granted or self.resources
        cuda = torch.cuda.is_available()
        if not cuda:
            torch.set_num_threads(max(1, int(granted.cpus)))
        try:
            # Any: transformers' own annotations of ``to`` differ by version; the model is used untyped.
            model: Any = transformers.AutoModelForImageTextToText.from_pretrained(path, local_files_only=True)
            image_processor = transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True)
            tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AnnotatorError(
                self.name, f"cannot load an image-to-text model from {path}: {exc}"
            ) from None
        device = torch.device("cuda") if cuda else torch.device("cpu")
        model = model.to(device).eval()
        weights = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
        if cuda:
            share = granted.gpus if granted.gpus > 0 else 1.0
            budget = int(torch.cuda.get_device_properties(device).total_memory * min(1.0, share))
        else:
            budget = int(granted.memory_bytes)
        self.batch_size = self.params.batch_size or caption_batch_size(
            budget, weights, int(self.params.frame_memory_bytes), self.params.frames
        )
        log.info(
            "caption: %s (%s) on %s, %.1f MB of weights, batches of %d frames",
            path.name,
            model.config.model_type,
            device,
            weights / 1e6,
            self.batch_size,
        )
        return {
            "torch": torch,
            "model": model,
            "image_processor": image_processor,
            "tokenizer": tokenizer,
            "device": device,
            "facts": {
                "caption.model": path.name,
                "caption.model_type": str(model.config.model_type),
                "caption.model_sha256": directory_sha256(path),
                "caption.transformers": transformers.__version__,
            },
        }

    def caption_images(self, images: np.ndarray) -> list[str]:
        """One caption per ``(h, w, 3)`` uint8 RGB image, generated ``batch_size`` images at a time."""
        self.setup()
        assert self._loaded is not None
        torch, model = self._loaded["torch"], self._loaded["model"]
        processor, tokenizer = self._loaded["image_processor"], self._loaded["tokenizer"]
        dtype = next(model.parameters()).dtype
        out: list[str] = []
        for start in range(0, len(images), self.batch_size):
            batch = [np.ascontiguousarray(img) for img in images[start : start + self.batch_size]]
            pixels = processor(images=batch, return_tensors="pt")["pixel_values"]
            with torch.inference_mode():
                tokens = model.generate(
                    pixel_values=pixels.to(self._loaded["device"], dtype=dtype),
                    max_new_tokens=self.params.max_new_tokens,
                    num_beams=self.params.num_beams,
                    do_sample=False,
                )
            self.generate_calls += 1
            out += [text.strip() for text in tokenizer.batch_decode(tokens, skip_special_tokens=True)]
        return out

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        self.setup()
        assert self._loaded is not None
        frames = source.frames()
        picks = [int(frames.indices[i]) for i in sample_indices(len(frames.luma), self.params.frames)]
        captions = self.caption_images(source.rgb_frames(picks))
        return {
            "caption.text": captions[len(captions) // 2],
            "caption.frames": [{"frame": f, "text": t} for f, t in zip(picks, captions, strict=True)],
            **self._loaded["facts"],
        }
