"""The annotator contract: what every annotator (built-in or model-backed) declares and does.

An annotator is a small class with a registry ``name``, the ``inputs`` it reads (video frames, the state
stream, the episode's metadata, raw messages), the source ``kinds`` it applies to, the ``resources`` one
worker needs and a frozen ``Params`` model for its ``params`` in the vendor config. The ``version`` comes from
the vendor config, not the code: re-running under a new version adds catalog rows next to the old ones.

``grant(resources)`` tells it what the worker was given (the annotate step's resources, raised to what its
most demanding annotator declares), so a model can size its batches; ``setup()`` runs once per worker
(load a model), ``annotate(source)`` once per episode and returns a flat
mapping of annotation keys to JSON values. Keys are namespaced by the annotator (``motion_energy.mean``),
except the manifest's quality scores (``quality_visual``, ``quality_motion``), which curation reads by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ValidationError

from pipeline.config.types import FrozenModel
from pipeline.enums import SourceKind
from pipeline.errors import ConfigError, InputError, SluiceError
from pipeline.steps.base import Resources

if TYPE_CHECKING:
    from pipeline.annotate.source import EpisodeSource


class AnnotatorInput(StrEnum):
    """What an annotator reads from an episode."""

    VIDEO = "video"  # decoded frames of the primary camera (or the clip's video stream)
    STATE = "state"  # the robot's state stream (joint positions, velocities, gripper)
    METADATA = "metadata"  # the episode's catalog row and its metadata record
    MESSAGES = "messages"  # raw message payloads of the log


class AnnotatorError(SluiceError):
    """An annotator could not produce its result for one episode (the other annotators still run)."""

    def __init__(self, annotator: str, detail: str) -> None:
        self.annotator = annotator
        self.detail = detail
        super().__init__(f"annotator {annotator}: {detail}")


class NoParams(FrozenModel):
    """Parameters of an annotator that takes none."""


class Annotator(ABC):
    """Base class of the annotators in :mod:`pipeline.annotate.registry`."""

    name: ClassVar[str]
    inputs: ClassVar[frozenset[AnnotatorInput]]
    kinds: ClassVar[frozenset[SourceKind]] = frozenset(SourceKind)
    # One core and 1 GiB hold a few hundred small decoded frames and numpy work on them.
    default_resources: ClassVar[Resources] = Resources(cpus=1.0, memory_bytes=1 << 30)
    Params: ClassVar[type[FrozenModel]] = NoParams

    def __init__(self, version: str, params: Mapping[str, Any] | None = None) -> None:
        self.version = version
        self.granted: Resources | None = None  # what the worker was given; set by :meth:`grant`
        try:
            self.params: Any = self.Params.model_validate(dict(params or {}))
        except ValidationError as exc:
            problems = [
                (
                    ".".join(str(p) for p in ("annotate", "annotators", self.name, "params", *err["loc"])),
                    err["msg"],
                )
                for err in exc.errors()
            ]
            raise ConfigError(f"annotator {self.name}", problems) from None

    @property
    def resources(self) -> Resources:
        """What one worker running this annotator needs (the annotate step asks for the largest)."""
        return self.default_resources

    def applies_to(self, kind: SourceKind | str) -> bool:
        """Whether this annotator has anything to say about a source of ``kind``."""
        return SourceKind(kind) in self.kinds

    def grant(self, resources: Resources) -> None:
        """Record what one worker running this annotator was given (before ``setup``)."""
        self.granted = resources

    def setup(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Per-worker initialisation (load a model); runs once before the first ``annotate``."""

    @abstractmethod
    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        """The annotation keys and JSON values of one episode; raise on failure."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version!r})"


def missing_input(annotator: str, what: str) -> InputError:
    """The error an annotator raises when the episode lacks what it reads."""
    from pipeline.enums import ReasonCode

    return InputError(ReasonCode.ANNOTATOR_FAILED.value, f"{annotator}: {what}")
