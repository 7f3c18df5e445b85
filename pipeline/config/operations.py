"""How a vendor's runs are scheduled and placed: schedule and stagger, planner limits, pools and per-step
defaults (enabled, critical, pool, resources).

None of this changes what a step produces, so none of it enters a step's config hash: changing a pool or
the CPUs of transcode never invalidates transcoded outputs.
"""

from __future__ import annotations

from typing import Any, Literal

from croniter import croniter
from pydantic import ByteSize, Field, field_validator, model_validator

from pipeline.config.types import FrozenModel, Loc, PositiveBytes, Slug, deep_merge, raise_problems
from pipeline.enums import StepName

#: Airflow's schedule presets.
SCHEDULE_PRESETS = (
    "@once",
    "@continuous",
    "@hourly",
    "@daily",
    "@weekly",
    "@monthly",
    "@quarterly",
    "@yearly",
)

_GIB = 2**30


class Schedule(FrozenModel):
    """When the vendor's DAG runs."""

    cron: str | None = Field(
        default=None,
        description=f"5-field cron expression or one of {', '.join(SCHEDULE_PRESETS)}; none = manual runs.",
    )
    stagger_offset_s: float = Field(
        default=0.0,
        ge=0,
        le=86_400,
        description="Delay after the scheduled time, so vendors on the same cron do not start together.",
    )

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, cron: str | None) -> str | None:
        if cron is None or cron in SCHEDULE_PRESETS:
            return cron
        if cron.startswith("@"):
            raise ValueError(f"unknown schedule preset {cron!r}; allowed: {', '.join(SCHEDULE_PRESETS)}")
        if len(cron.split()) != 5 or not croniter.is_valid(cron):
            raise ValueError(
                f"{cron!r} is not a 5-field cron expression (minute hour day month weekday) nor a preset "
                f"({', '.join(SCHEDULE_PRESETS)})"
            )
        return cron


class PlannerLimits(FrozenModel):
    """What the batch planner must respect: the cluster's physical limits and per-split caps."""

    balance: Literal["bytes", "cost"] = Field(
        default="bytes",
        description="Balance splits on bytes, or on estimated cost (duration × pixels × codec).",
    )
    min_splits: int = Field(default=1, ge=1, description="Fewest batches a run is split into.")
    max_splits: int = Field(default=64, ge=1, le=4096, description="Most batches (k) a run is split into.")
    # Each file becomes a few dozen catalog rows; 2,000 files keeps one batch's writes within seconds.
    max_files_per_split: int = Field(
        default=2000, ge=1, description="Cap on files per split (database writes)."
    )
    # A worker's local scratch must hold a split's inputs and outputs.
    max_bytes_per_split: PositiveBytes = Field(
        default=ByteSize(200 * _GIB), description="Cap on bytes per split."
    )
    max_cost_per_split: float | None = Field(
        default=None, gt=0, description="Cap on estimated cost per split."
    )
    split_large_files: bool = Field(
        default=True,
        description="Cut files larger than a fair share into time-range chunks where the step allows.",
    )
    # The benchmark target: n = 10,000 files, k = 64 solved within 5 s.
    solver_time_limit_s: float = Field(default=5.0, gt=0, le=600, description="CP-SAT time limit.")
    # Spreads identical steps of consecutive batches so that they do not finish in lockstep.
    batch_stagger_s: float = Field(
        default=15.0, ge=0, description="Start offset between consecutive batches."
    )
    # One 1 GbE link, one SSD, a shared Postgres and the 2 cores of the reference machine.
    network_bytes_per_s: PositiveBytes = Field(
        default=ByteSize(125_000_000), description="Source read bandwidth."
    )
    storage_bytes_per_s: PositiveBytes = Field(
        default=ByteSize(500_000_000), description="Store write bandwidth."
    )
    db_writes_per_s: int = Field(
        default=5000, ge=1, description="Catalog rows per second the database absorbs."
    )
    worker_slots: int = Field(default=2, ge=1, description="Parallel workers available to one step.")

    @model_validator(mode="after")
    def _order(self) -> PlannerLimits:
        if self.min_splits > self.max_splits:
            raise_problems([(("min_splits",), f"{self.min_splits} > max_splits {self.max_splits}")])
        return self


class PoolConfig(FrozenModel):
    """An Airflow pool (``sluice airflow pools`` creates or updates it)."""

    slots: int = Field(ge=1, le=10_000, description="Task slots of the pool.")
    description: str = Field(default="", description="Shown in the Airflow UI.")


#: Pools every vendor has unless it overrides their slots. cpu: the 2 cores of the reference machine;
#: io: I/O-bound tasks overlap well, so twice the cores; db: connections one vendor may hold; gpu: one device.
DEFAULT_POOLS: dict[str, dict[str, Any]] = {
    "cpu": {"slots": 2, "description": "CPU-bound media work (probe, transcode, checks)."},
    "io": {"slots": 4, "description": "I/O-bound work (landing, shard writes)."},
    "db": {"slots": 4, "description": "Catalog-heavy work (warehouse sync, finalize)."},
    "gpu": {"slots": 1, "description": "GPU annotators."},
}

#: The Celery queues the deployment's workers serve, one per default pool plus default (docker/compose.yaml,
#: the Ansible inventories; a DAG test checks both): CPU hosts serve default, cpu, io and db, GPU hosts gpu.
DEFAULT_QUEUE = "default"
SERVED_QUEUES: tuple[str, ...] = (DEFAULT_QUEUE, *DEFAULT_POOLS)


class Resources(FrozenModel):
    """What one task of a step needs; read by the Ray runner and the pool mapping, never hard-coded."""

    cpus: float = Field(gt=0, le=1024, description="CPU cores (fractions allowed, as in Ray).")
    memory_bytes: PositiveBytes = Field(description="Memory, e.g. '4 GiB'.")
    gpus: float = Field(default=0.0, ge=0, le=64, description="GPUs (fractions allowed, as in Ray).")


class StepConfig(FrozenModel):
    """Per-step orchestration defaults; a run's trigger form can switch ``enabled`` per run."""

    enabled: bool = Field(description="Run this step by default (a run may override).")
    critical: bool = Field(description="A failure fails the run; a non-critical failure is a warning.")
    pool: Slug = Field(description="Airflow pool of the step's tasks (must be declared under pools).")
    pool_slots: int = Field(default=1, ge=1, description="Pool slots one task takes.")
    queue: Slug | None = Field(
        default=None,
        description=(
            "Celery queue of the step's tasks, i.e. which workers run them; one of the queues the "
            "deployment's workers serve (default, cpu, io and db on CPU hosts, gpu on GPU hosts). Unset: the "
            "queue named after the step's pool when there is one, else default. The LocalExecutor has no "
            "queues."
        ),
    )
    resources: Resources
    retries: int = Field(default=2, ge=0, le=20, description="Airflow retries of an infrastructure fault.")
    timeout_s: float = Field(
        default=3600.0, gt=0, description="Execution timeout of one task (and its Ray calls)."
    )

    @field_validator("queue")
    @classmethod
    def _served_queue(cls, queue: str | None) -> str | None:
        if queue is not None and queue not in SERVED_QUEUES:
            # A task sent to a queue no worker serves waits in the queue until it times out, run after run.
            raise ValueError(f"no worker serves queue {queue!r}; served queues: {', '.join(SERVED_QUEUES)}")
        return queue

    @property
    def celery_queue(self) -> str:
        """The queue the step's tasks are sent to: ``queue``, else the pool's name if a worker serves a queue
        of that name (a vendor's own pool, say ``bulk_io``, has none), else ``default``."""
        if self.queue is not None:
            return self.queue
        return self.pool if self.pool in SERVED_QUEUES else DEFAULT_QUEUE


#: Per-step defaults; a vendor file overrides any part (nested keys merge). The numbers:
#: - ingest: one stream copied and hashed per file is one core; chunks are read one at a time, so 1 GiB.
#:   Three retries: landing talks to remote storage, whose faults are transient.
#: - quality_pre: probes run in a subprocess capped at 2 GiB (ingest.probe_memory_bytes), one core each.
#: - transcode: two encoder processes beat one with two threads (MEASURED.md), so two cores and two cpu
#:   slots; 4 GiB holds three cameras' decoded 720p frames plus x264 lookahead. Four hours for long logs.
#: - quality_post: decodes sampled frames for PSNR: one core, 2 GiB.
#: - annotate: built-in annotators need no GPU; off by default and non-critical (a failure is a warning).
#: - shard: tar streaming, I/O-bound; off by default until datasets are curated, and non-critical.
STEP_DEFAULTS: dict[StepName, dict[str, Any]] = {
    StepName.INGEST: {
        "enabled": True,
        "critical": True,
        "pool": "io",
        "retries": 3,
        "resources": {"cpus": 1.0, "memory_bytes": 1 * _GIB, "gpus": 0.0},
    },
    StepName.QUALITY_PRE: {
        "enabled": True,
        "critical": True,
        "pool": "cpu",
        "resources": {"cpus": 1.0, "memory_bytes": 2 * _GIB, "gpus": 0.0},
    },
    StepName.TRANSCODE: {
        "enabled": True,
        "critical": True,
        "pool": "cpu",
        "pool_slots": 2,
        "timeout_s": 4 * 3600.0,
        "resources": {"cpus": 2.0, "memory_bytes": 4 * _GIB, "gpus": 0.0},
    },
    StepName.QUALITY_POST: {
        "enabled": True,
        "critical": True,
        "pool": "cpu",
        "resources": {"cpus": 1.0, "memory_bytes": 2 * _GIB, "gpus": 0.0},
    },
    StepName.ANNOTATE: {
        "enabled": False,
        "critical": False,
        "pool": "cpu",
        "resources": {"cpus": 1.0, "memory_bytes": 2 * _GIB, "gpus": 0.0},
    },
    StepName.SHARD: {
        "enabled": False,
        "critical": False,
        "pool": "io",
        "resources": {"cpus": 1.0, "memory_bytes": 1 * _GIB, "gpus": 0.0},
    },
}


def _default_step(step: StepName) -> Any:
    return Field(default_factory=lambda: StepConfig.model_validate(STEP_DEFAULTS[step]))


class StepsConfig(FrozenModel):
    """One :class:`StepConfig` per :class:`pipeline.enums.StepName`; a file gives only what it changes."""

    ingest: StepConfig = _default_step(StepName.INGEST)
    quality_pre: StepConfig = _default_step(StepName.QUALITY_PRE)
    transcode: StepConfig = _default_step(StepName.TRANSCODE)
    quality_post: StepConfig = _default_step(StepName.QUALITY_POST)
    annotate: StepConfig = _default_step(StepName.ANNOTATE)
    shard: StepConfig = _default_step(StepName.SHARD)

    @model_validator(mode="before")
    @classmethod
    def _merge_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {
            key: deep_merge(STEP_DEFAULTS[StepName(key)], value) if key in STEP_DEFAULTS else value
            for key, value in data.items()
        }

    def __getitem__(self, step: StepName | str) -> StepConfig:
        """The config of one step: ``steps[StepName.TRANSCODE]``."""
        result: StepConfig = getattr(self, StepName(step).value)
        return result

    def items(self) -> list[tuple[StepName, StepConfig]]:
        """Steps in pipeline order."""
        return [(step, self[step]) for step in StepName]


def merge_pools(data: Any) -> Any:
    """Overlay a file's ``pools`` mapping on :data:`DEFAULT_POOLS` (defaults stay unless overridden)."""
    if data is None:
        return DEFAULT_POOLS
    if not isinstance(data, dict):
        return data
    return deep_merge(DEFAULT_POOLS, data)


def check_step_pools(steps: StepsConfig, pools: dict[str, PoolConfig]) -> list[tuple[Loc, str]]:
    """Every step's pool must be declared and hold at least the step's ``pool_slots``."""
    problems: list[tuple[Loc, str]] = []
    for step, config in steps.items():
        if config.pool not in pools:
            problems.append(
                (
                    ("steps", step.value, "pool"),
                    f"unknown pool {config.pool!r}; declared pools: {', '.join(sorted(pools))}",
                )
            )
        elif config.pool_slots > pools[config.pool].slots:
            problems.append(
                (
                    ("steps", step.value, "pool_slots"),
                    f"{config.pool_slots} slots never fit pool {config.pool!r} "
                    f"of {pools[config.pool].slots} slots",
                )
            )
    return problems


#: The pool (and the Celery queue) of the GPU hosts.
GPU_POOL = "gpu"


def check_gpu_annotators(
    annotators: dict[str, Any], steps: StepsConfig, pools: dict[str, PoolConfig]
) -> list[tuple[Loc, str]]:
    """An annotator that asks for GPUs (``params.gpus`` > 0, the captioner on a GPU host) needs the annotate
    step on the gpu pool or queue when the vendor has one: elsewhere its tasks go to CPU hosts, where Ray
    waits for a GPU that never comes."""
    annotate = steps[StepName.ANNOTATE]
    if GPU_POOL not in pools or GPU_POOL in (annotate.pool, annotate.celery_queue):
        return []
    problems: list[tuple[Loc, str]] = []
    for name, config in sorted(annotators.items()):
        gpus = config.params.get("gpus")
        if config.enabled and isinstance(gpus, int | float) and gpus > 0:
            problems.append(
                (
                    ("annotate", "annotators", name, "params", "gpus"),
                    f"asks for {gpus} GPU(s) but steps.annotate runs on pool {annotate.pool!r}: GPU hosts "
                    f"serve pool {GPU_POOL!r}; set steps.annotate.pool: {GPU_POOL} (or gpus: 0 for the CPU)",
                )
            )
    return problems
