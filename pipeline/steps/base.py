"""The step contract: what every per-batch step (ingest, quality_pre, transcode, ...) looks like.

A step is a small class with a ``name`` (the same word is its module, the Airflow task_id and the catalog
value), the vendor config it reads, the ``resources`` it needs (from the vendor's step config, read by the
Ray runner and the Airflow pool mapping; never hard-coded at call sites), a ``setup()`` that runs once per
worker (open a decoder, warm a model) apart from the constructor, and ``process(item) -> StepResult``.

A bad item is a *result*, not an exception: ``process`` returns ``StepResult.rejected(reason, detail)`` (or
raises :class:`pipeline.errors.InputError`, which the runner turns into the same) and the batch goes on. An
infrastructure fault raises any other exception so that Airflow or Ray retries.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pipeline.enums import ReasonCode, StepName, StepStatus

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pipeline.config import VendorConfig
    from pipeline.settings import Settings
    from pipeline.store import Store


@dataclass(frozen=True)
class Resources:
    """What one worker of a step needs; mapped onto Ray's resources and Airflow pool slots."""

    cpus: float = 1.0
    memory_bytes: int = 1 << 30
    gpus: float = 0.0


@dataclass(frozen=True)
class WorkItem:
    """One unit of work: an episode (after ingest) or a discovered source file (for ingest itself)."""

    key: str  # stable identity inside the batch: episode id, or the source path for ingest
    episode_id: int | None = None
    source_path: str | None = None
    size_bytes: int = 0


@dataclass(frozen=True)
class StepResult:
    """The outcome of one step on one item."""

    status: StepStatus
    reason: ReasonCode | None = None
    detail: str | None = None
    outputs: Mapping[str, Any] = field(default_factory=dict)
    episode_id: int | None = None  # ingest learns the episode id while processing

    @classmethod
    def succeeded(cls, *, episode_id: int | None = None, **outputs: Any) -> StepResult:
        return cls(StepStatus.SUCCEEDED, outputs=outputs, episode_id=episode_id)

    @classmethod
    def rejected(cls, reason: ReasonCode, detail: str, *, episode_id: int | None = None) -> StepResult:
        return cls(StepStatus.REJECTED, reason=reason, detail=detail, episode_id=episode_id)


@dataclass(frozen=True)
class StepContext:
    """The clients a step works with, built once by the entry point and passed in (never read from env)."""

    settings: Settings
    engine: Engine
    store: Store
    code_version: str


class Step(ABC):
    """Base class of the per-batch steps."""

    name: ClassVar[StepName]

    def __init__(self, vendor: VendorConfig, ctx: StepContext) -> None:
        self.vendor = vendor
        self.ctx = ctx

    @property
    def resources(self) -> Resources:
        spec = self.vendor.steps[self.name].resources
        return Resources(cpus=float(spec.cpus), memory_bytes=int(spec.memory_bytes), gpus=float(spec.gpus))

    @property
    def config_hash(self) -> str:
        """Hash of exactly what this step reads from the vendor config; stored with every output."""
        from pipeline.config import step_config_hash

        return step_config_hash(self.vendor, self.name)

    def setup(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Per-worker initialisation (decoders, models); runs once before the first ``process``."""

    def close(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Release what ``setup`` acquired (process pools, decoders); the runner calls it after a batch."""

    @abstractmethod
    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        """The items of a batch this step must process (e.g. only accepted episodes after the pre-gate)."""

    @abstractmethod
    def process(self, item: WorkItem) -> StepResult:
        """Process one item; bad input returns a rejection, infrastructure faults raise."""
