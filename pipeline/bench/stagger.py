"""``sluice bench stagger``: peak task completions per second, staggered batch starts against lockstep.

The same work twice, through the real thing: a local Airflow (scheduler, DAG processor, API server,
triggerer, LocalExecutor) started by :class:`pipeline.airflow_local.LocalAirflow`, a throwaway Postgres
catalog, and two vendor DAGs rendered by the repository's DAG factory that differ only in
``planner.batch_stagger_s``: ``stagger_lockstep`` (0: every batch starts at once) and ``stagger_staggered``
(one step's duration spread over the batches). Each run plans ``batches`` batches of one file and runs three
steps per batch: the real ``ingest`` (landing and catalog writes, padded to the step's duration) and two
steps that work for the same fixed time per batch (:class:`TimedStep`), recording their step runs in the
catalog. The figure is read from the metadata DB: the largest number of per-batch step tasks whose
``end_date`` falls inside any one-second window (sliding, so a burst straddling a second boundary counts
whole). ``peak_completions_ratio`` = lockstep peak / staggered peak (target ≥ 4).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.enums import StepName
from pipeline.errors import UnknownChoiceError
from pipeline.settings import Settings
from pipeline.steps.base import Step, StepResult, WorkItem
from pipeline.steps.ingest import IngestStep

if TYPE_CHECKING:
    from pipeline.orchestrate.airflow_client import AirflowClient

log = logging.getLogger(__name__)

#: Simulated processing rate: a batch's one file of ``step_s × SIMULATED_BYTES_PER_S`` bytes takes
#: ``step_s`` seconds in every timed step (small files, so landing them costs nothing measurable).
SIMULATED_BYTES_PER_S = 1000
#: batches, seconds of work per step and batch. The staggered variant spreads the batches over one step's
#: work, 3 s apart: wider than the jitter a step's start picks up on a busy 2-core machine (scheduler loop
#: and task start-up, 1-2 s; at 2 s apart, later steps of neighbouring batches were seen to collide), so
#: that consecutive batches' completions land in different seconds.
SIZES: dict[str, dict[str, Any]] = {
    "small": {"batches": 6, "step_s": 18.0},
    "default": {"batches": 8, "step_s": 24.0},
    "large": {"batches": 16, "step_s": 48.0},
}
ENABLED_STEPS = (StepName.INGEST, StepName.QUALITY_PRE, StepName.TRANSCODE)
WINDOW_S = 1.0
DAG_FILE = '''"""Airflow DAGs of `sluice bench stagger`: the bench vendors, rendered by the repository's factory."""

from sluice_factory import vendor_dags

globals().update(vendor_dags(step_resolver="pipeline.bench.stagger:step_class", executor="local"))
'''


class TimedStep(Step):
    """Works ``size_bytes / SIMULATED_BYTES_PER_S`` seconds on each episode of the batch and records it."""

    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        return [item for item in batch_items if item.episode_id is not None]

    def process(self, item: WorkItem) -> StepResult:
        time.sleep(item.size_bytes / SIMULATED_BYTES_PER_S)
        return StepResult.succeeded(episode_id=item.episode_id)


class TimedIngest(IngestStep):
    """The real ingest, padded so that each file takes as long as the timed steps."""

    def process(self, item: WorkItem) -> StepResult:
        started = time.monotonic()
        result = super().process(item)
        time.sleep(max(0.0, item.size_bytes / SIMULATED_BYTES_PER_S - (time.monotonic() - started)))
        return result


def _timed(step: StepName) -> type[Step]:
    return type(f"Timed{step.value.title().replace('_', '')}", (TimedStep,), {"name": step})


_STEP_CLASSES: dict[StepName, type[Step]] = {
    StepName.INGEST: TimedIngest,
    **{step: _timed(step) for step in StepName if step is not StepName.INGEST},
}


def step_class(name: StepName | str) -> type[Step]:
    """The bench's step resolver (named in the generated DAG file)."""
    return _STEP_CLASSES[StepName(name)]


def peak_completions(end_times_s: Sequence[float], window_s: float = WINDOW_S) -> int:
    """The most completions inside any window of ``window_s`` seconds (half-open, sliding)."""
    ends = sorted(end_times_s)
    peak, first = 0, 0
    for last, end in enumerate(ends):
        while ends[first] <= end - window_s:
            first += 1
        peak = max(peak, last - first + 1)
    return peak


def vendor_file_text(name: str, drop: Path, *, batches: int, batch_stagger_s: float, slots: int) -> str:
    """A bench vendor: every enabled step on a pool of ``slots`` slots, so that all batches run at once."""
    steps = "\n".join(
        f"  {step.value}:\n    enabled: {'true' if step in ENABLED_STEPS else 'false'}\n"
        f"    pool: bench\n    pool_slots: 1\n    retries: 0"
        for step in StepName
    )
    return (
        f"name: {name}\nkind: mcap\ndescription: sluice bench stagger ({name})\n"
        f"source:\n  url: {drop}\n  include: ['*.mcap']\n  settle_s: 0\n"
        "topics: {}\n"
        f"planner:\n  min_splits: {batches}\n  max_splits: {batches}\n  batch_stagger_s: {batch_stagger_s}\n"
        f"pools:\n  bench: {{slots: {slots}, description: sluice bench stagger}}\n"
        f"steps:\n{steps}\n"
    )


def run(size: str, settings: Settings) -> dict[str, Any]:
    """Run the lockstep and the staggered variant one after the other; see the module docstring."""
    if size not in SIZES:
        raise UnknownChoiceError("size", size, SIZES)
    batches, step_s = int(SIZES[size]["batches"]), float(SIZES[size]["step_s"])
    settings.home_abs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-stagger-", dir=settings.home_abs))
    try:
        results = _run(work, batches, step_s)
    except BaseException:
        log.error("bench stagger failed; its Airflow logs and files are kept in %s", work)
        raise
    shutil.rmtree(work, ignore_errors=True)
    return results


def _run(work: Path, batches: int, step_s: float) -> dict[str, Any]:
    from pipeline.airflow_local import REPO_ROOT, LocalAirflow, pools_from_vendors
    from pipeline.catalog import migrate
    from pipeline.config import load_vendors
    from pipeline.pgserver import LocalPostgres

    work.chmod(0o755)  # the Postgres server may run as another user, who must reach its data folder
    vendors_dir, dags_folder = work / "vendors", work / "dags"
    for folder in (vendors_dir, dags_folder):
        folder.mkdir()
    size_bytes = int(step_s * SIMULATED_BYTES_PER_S)
    variants = {"stagger_lockstep": 0.0, "stagger_staggered": round(step_s / batches, 3)}
    for number, (name, gap_s) in enumerate(variants.items()):
        drop = work / "drops" / name
        drop.mkdir(parents=True)
        for index in range(batches):
            # Distinct bytes per file: identical files would be duplicates of one episode.
            pattern = (number * 1000 + index).to_bytes(4, "big")
            (drop / f"file_{index:03d}.mcap").write_bytes(pattern * (size_bytes // 4))
        (vendors_dir / f"{name}.yaml").write_text(
            vendor_file_text(name, drop, batches=batches, batch_stagger_s=gap_s, slots=batches + 2)
        )
    (dags_folder / "bench_stagger_dags.py").write_text(DAG_FILE)
    postgres = LocalPostgres(work / "pg", fast=True)
    catalog_url = postgres.up()
    airflow: LocalAirflow | None = None
    try:
        migrate.upgrade(catalog_url)
        vendors = [v for v in load_vendors(vendors_dir).values() if not isinstance(v, Exception)]
        airflow = LocalAirflow(
            work / "airflow",
            sluice_env={
                "SLUICE_HOME": str(work / "home"),
                "SLUICE_DATABASE_URL": catalog_url,
                "SLUICE_STORE_URL": str(work / "store"),
                "SLUICE_VENDORS_DIR": str(vendors_dir),
                "SLUICE_PROJECT_DIR": str(work),
            },
            dags_folder=dags_folder,
            extra_python_path=[REPO_ROOT / "dags"],
            # Every batch's task at once, plus the run-level tasks.
            parallelism=batches + 4,
            config_overrides={"core": {"dags_are_paused_at_creation": "False"}},
        )
        started = time.monotonic()
        airflow.up(pools=pools_from_vendors(vendors))
        up_s = time.monotonic() - started
        client = airflow.client()
        client.wait_for_dags(variants)
        runs = {name: _measure(client, name, batches) for name in variants}
    finally:
        if airflow is not None:
            airflow.down()
        postgres.destroy()
    lockstep, staggered = runs["stagger_lockstep"], runs["stagger_staggered"]
    return {
        "peak_completions_ratio": lockstep["peak_completions_per_s"]
        / max(1, staggered["peak_completions_per_s"]),
        "lockstep_peak_completions_per_s": lockstep["peak_completions_per_s"],
        "staggered_peak_completions_per_s": staggered["peak_completions_per_s"],
        "lockstep_run_s": lockstep["run_s"],
        "staggered_run_s": staggered["run_s"],
        "batches": batches,
        "step_s": step_s,
        "steps_per_batch": len(ENABLED_STEPS),
        "batch_stagger_s": variants["stagger_staggered"],
        "window_s": WINDOW_S,
        "airflow_up_s": round(up_s, 1),
        "runs": runs,
    }


def _measure(client: AirflowClient, dag_id: str, batches: int) -> dict[str, Any]:
    run_id = client.trigger(dag_id, run_id=f"bench__{datetime.now(UTC):%Y%m%dT%H%M%S%f}")
    started = time.monotonic()
    state = client.wait_for_run(dag_id, run_id, timeout_s=1800)
    run_s = time.monotonic() - started
    steps = {step.value for step in ENABLED_STEPS}
    tis = [ti for ti in client.task_instances(dag_id, run_id) if ti.task_id in steps]
    ends = [ti.end_s for ti in tis if ti.state == "success" and ti.end_s is not None]
    if state != "success" or len(ends) != batches * len(steps):
        raise RuntimeError(
            f"bench run {dag_id}/{run_id} ended {state} with {len(ends)} of {batches * len(steps)} step tasks done"
        )
    first = min(ends)
    return {
        "state": state,
        "run_s": round(run_s, 1),
        "peak_completions_per_s": peak_completions(ends),
        "completion_offsets_s": [round(end - first, 3) for end in sorted(ends)],
    }
