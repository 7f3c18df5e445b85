"""The DAG factory: one Airflow DAG per vendor file, rendered from its validated config.

``vendor_dags.py`` calls :func:`vendor_dags` (every valid vendor file becomes a DAG) and
``vendor_config_check.py`` calls :func:`check_vendor_files` (every broken one becomes an import error naming
the file and key). The two live in separate files on purpose: Airflow marks every DAG of a file that has an
import error as stale, so a broken vendor file reported from the file that renders the DAGs would take the
other vendors' DAGs down with it.

Task shape of every vendor DAG::

    validate_conf → discover → plan → batch[i]: ingest → quality_pre → transcode → quality_post
                                                 → annotate → shard   (mapped over the planned batch ids)
                  → dedup → warehouse_sync → finalize

This module is the wiring; the task bodies, a few lines around one :mod:`pipeline.orchestrate` call each,
are in :mod:`sluice_tasks`. Heavy modules are imported inside them, and nothing here touches a database
while the file is parsed. Both modules are importable because Airflow puts the DAG folder on ``sys.path``;
``.airflowignore`` keeps the DAG processor from parsing them as DAG files of their own.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sluice_tasks
from airflow.sdk import DAG, CronTriggerTimetable, Param, TriggerRule, dag, task, task_group

from pipeline.config import StepConfig, VendorConfig, load_vendors
from pipeline.config.loader import VENDOR_SUFFIXES
from pipeline.enums import StepName
from pipeline.errors import ConfigError
from pipeline.orchestrate.names import DEDUP, DISCOVER, FINALIZE, PLAN, VALIDATE_CONF, WAREHOUSE_SYNC
from pipeline.orchestrate.toggles import toggle_description
from pipeline.orchestrate.vendors import vendors_folder
from pipeline.settings import Settings, load_settings

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

#: Retries of the run-level tasks; a step's own come from its config. Two absorb a database restart.
RUN_TASK_RETRIES = 2
#: First retry after a minute, then doubling up to a quarter of an hour: long enough for a database or
#: store restart, short enough that a transient fault does not stall the night's run.
RETRY_DELAY = timedelta(minutes=1)
RETRY_BACKOFF = 2.0
MAX_RETRY_DELAY = timedelta(minutes=15)
#: Discovery lists a drop twice ``settle_s`` apart; planning is bounded by the solver's time limit.
RUN_TASK_TIMEOUT = timedelta(minutes=30)
#: One run per vendor at a time: a second run would discover and plan the same files.
MAX_ACTIVE_RUNS = 1
#: "module:function" returning the Step class of a StepName; tests and benchmarks pass their own.
DEFAULT_STEP_RESOLVER = "pipeline.steps.registry:step_class"
#: The group the per-batch steps are mapped in; its tasks keep the steps' own names as task ids.
BATCH_GROUP = "batch"
#: Pools of the run-level tasks (every vendor has cpu, io and db: see pipeline.config.DEFAULT_POOLS); their
#: Celery queues have the same names, as the steps' do by default (StepConfig.celery_queue).
DISCOVER_POOL = "io"
PLAN_POOL = "cpu"
CATALOG_POOL = "db"


class VendorFilesInvalid(ConfigError):
    """One or more vendor files cannot become DAGs; the message lists every file and key at fault."""


def vendor_dags(
    *,
    settings: Settings | None = None,
    step_resolver: str = DEFAULT_STEP_RESOLVER,
    executor: str | None = None,
) -> dict[str, DAG]:
    """One DAG per valid vendor file, keyed by DAG id (the vendor's name); broken files are left out.

    Broken files are reported by :func:`check_vendor_files`, from a DAG file of their own.
    """
    settings = settings or load_settings()
    folder = vendors_folder(settings)
    try:
        loaded = load_vendors(folder, base_dir=settings.project_dir_abs)
    except ConfigError:
        return {}
    files = _vendor_files(folder)
    return {
        vendor.name: build_vendor_dag(
            vendor, vendor_file=files[stem], step_resolver=step_resolver, executor=executor
        )
        for stem, vendor in loaded.items()
        if isinstance(vendor, VendorConfig)
    }


def check_vendor_files(*, settings: Settings | None = None) -> int:
    """Raise :class:`VendorFilesInvalid` naming every broken vendor file and key; returns how many are valid."""
    settings = settings or load_settings()
    folder = vendors_folder(settings)
    loaded = load_vendors(folder, base_dir=settings.project_dir_abs)
    broken = [result for result in loaded.values() if isinstance(result, ConfigError)]
    if broken:
        problems = [
            (f"{error.source}: {key_path}" if key_path else error.source, message)
            for error in broken
            for key_path, message in error.problems
        ]
        raise VendorFilesInvalid(
            f"{len(broken)} of {len(loaded)} vendor file(s) in {folder} cannot become DAGs", problems
        )
    return len(loaded)


def build_vendor_dag(
    vendor: VendorConfig,
    *,
    vendor_file: Path,
    step_resolver: str = DEFAULT_STEP_RESOLVER,
    executor: str | None = None,
) -> DAG:
    """The DAG of one vendor: schedule, toggles, pools, retries and criticality all from its config.

    ``executor`` forces the step runner's executor ("local" or "ray") for every step; by default heavy steps
    use Ray when a cluster address is configured (:func:`pipeline.orchestrate.default_executor`).
    """
    step_tasks = [
        _step_task(vendor, step, config, previous, step_resolver, executor)
        for step, config, previous in _with_previous(vendor)
    ]

    @dag(
        dag_id=vendor.name,
        description=vendor.description or None,
        doc_md=render_doc_md(vendor, vendor_file),
        schedule=schedule_of(vendor),
        catchup=False,
        max_active_runs=MAX_ACTIVE_RUNS,
        tags=dag_tags(vendor),
        params={
            step.value: Param(
                config.enabled, type="boolean", title=step.value, description=toggle_description(vendor, step)
            )
            for step, config in vendor.steps.items()
        },
        default_args={
            "owner": vendor.owner,
            "retries": RUN_TASK_RETRIES,
            "retry_delay": RETRY_DELAY,
            "retry_exponential_backoff": RETRY_BACKOFF,
            "max_retry_delay": MAX_RETRY_DELAY,
        },
    )
    def vendor_pipeline() -> None:
        @task(task_id=VALIDATE_CONF, execution_timeout=RUN_TASK_TIMEOUT)
        def validate_conf() -> int:
            """Refuse unknown run options, wait out the vendor's schedule offset, open the run."""
            return sluice_tasks.open_run(vendor)

        @task(task_id=DISCOVER, pool=DISCOVER_POOL, queue=DISCOVER_POOL, execution_timeout=RUN_TASK_TIMEOUT)
        def discover(pipeline_run_id: int) -> dict[str, Any]:
            """List the finished input files; the listing is a run artifact, XCom gets counts and its URI."""
            return sluice_tasks.discover(vendor, pipeline_run_id)

        @task(task_id=PLAN, pool=PLAN_POOL, queue=PLAN_POOL, execution_timeout=RUN_TASK_TIMEOUT)
        def plan(discovered: dict[str, Any]) -> list[int]:
            """Split the files into staggered batches; returns the batch ids the steps are mapped over."""
            return sluice_tasks.plan(vendor, int(discovered["pipeline_run_id"]))

        @task_group(group_id=BATCH_GROUP, prefix_group_id=False)
        def batch(pipeline_run_id: int, batch_id: int) -> Any:
            previous = None
            for make_task in step_tasks:
                current = make_task(pipeline_run_id=pipeline_run_id, batch_id=batch_id)
                if previous is not None:
                    previous >> current
                previous = current
            return previous

        @task(task_id=DEDUP, pool=CATALOG_POOL, queue=CATALOG_POOL, trigger_rule=TriggerRule.ALL_DONE)
        def dedup() -> dict[str, Any]:
            """Group near-duplicate episodes of every vendor (skipped when this run annotated nothing)."""
            return sluice_tasks.dedup(vendor)

        @task(
            task_id=WAREHOUSE_SYNC, pool=CATALOG_POOL, queue=CATALOG_POOL, trigger_rule=TriggerRule.ALL_DONE
        )
        def warehouse_sync() -> dict[str, Any]:
            """Bring the DuckDB warehouse up to date with what this run wrote (skipped if it is not built)."""
            return sluice_tasks.sync_warehouse()

        @task(task_id=FINALIZE, pool=CATALOG_POOL, queue=CATALOG_POOL, trigger_rule=TriggerRule.ALL_DONE)
        def finalize() -> dict[str, Any]:
            """Decide and record the run's outcome; fail only if a critical task failed."""
            return sluice_tasks.finalize(vendor)

        run_id = validate_conf()
        batch_ids = plan(discover(run_id))
        batches = batch.partial(pipeline_run_id=run_id).expand(batch_id=batch_ids)
        batches >> dedup() >> warehouse_sync() >> finalize()

    return vendor_pipeline()


def schedule_of(vendor: VendorConfig) -> Any:
    """The vendor's cron as a trigger timetable whose first run is the next cron time, never one past.

    Unpausing a DAG must not start a run nobody asked for, with the default toggles. With a start date in
    the past and ``catchup`` off, Airflow schedules the most recent cron time at once when a DAG is
    unpaused (a nightly vendor unpaused in the afternoon ran that night's job there and then). With no
    start date, a :class:`CronTriggerTimetable` picks its first run by ``run_immediately``; its ``False``
    still takes the cron time just past when it is less than a tenth of the period (at least 5 minutes)
    ago (a 02:00 vendor unpaused at 02:07 ran at once: seen in the demo), so the window is made zero. A
    run now is what ``sluice run`` or the trigger form is for. No cron: manual runs only.
    """
    if vendor.schedule.cron is None:
        return None
    return CronTriggerTimetable(vendor.schedule.cron, timezone="UTC", run_immediately=timedelta(0))


def dag_tags(vendor: VendorConfig) -> list[str]:
    return list(dict.fromkeys(["sluice", vendor.kind.value, *vendor.tags]))


def render_doc_md(vendor: VendorConfig, vendor_file: Path) -> str:
    """The DAG's documentation page: the vendor, its source, schedule, and each step's settings."""
    schedule = vendor.schedule
    when = (
        f"`{schedule.cron}` (UTC), started {schedule.stagger_offset_s:g} s after the scheduled time"
        if schedule.cron
        else "manual runs only"
    )
    rows = [
        f"| {step.value} | {'on' if c.enabled else 'off'} | {'yes' if c.critical else 'no'} | {c.pool} "
        f"| {c.pool_slots} | {c.resources.cpus:g} CPU, {int(c.resources.memory_bytes) / 2**30:g} GiB"
        f"{f', {c.resources.gpus:g} GPU' if c.resources.gpus else ''} | {c.retries} |"
        for step, c in vendor.steps.items()
    ]
    return "\n".join(
        [
            f"# {vendor.name}",
            "",
            vendor.description or "(no description)",
            "",
            f"* **Config**: `{vendor_file}` (kind `{vendor.kind.value}`, owner {vendor.owner})",
            f"* **Source**: `{vendor.source.url}`, inputs `{', '.join(vendor.source.include)}`",
            f"* **Schedule**: {when}",
            f"* **Planner**: at most {vendor.planner.max_splits} batches of at most "
            f"{vendor.planner.max_files_per_split} files, balanced on {vendor.planner.balance}, "
            f"started at least {vendor.planner.batch_stagger_s:g} s apart",
            "",
            "Switch steps on or off for one run in the trigger form. A switched-off step is skipped and the "
            "next steps work on what is there. A failed critical step fails the run; a failed non-critical "
            "step is recorded as a warning and the run succeeds. Clearing a failed task resumes: work "
            "already recorded for the same config is skipped.",
            "",
            "| step | default | critical | pool | slots | resources | retries |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    )


# -- task bodies ------------------------------------------------------------------------------------------


def _with_previous(
    vendor: VendorConfig,
) -> list[tuple[StepName, StepConfig, list[tuple[StepName, StepConfig]]]]:
    ordered = vendor.steps.items()
    return [(step, config, ordered[:i]) for i, (step, config) in enumerate(ordered)]


def _step_task(
    vendor: VendorConfig,
    step: StepName,
    config: StepConfig,
    before: list[tuple[StepName, StepConfig]],
    step_resolver: str,
    executor: str | None,
) -> Any:
    """The mapped task of one step, on its pool with its slots, retries and timeout.

    After a critical step the trigger rule is ``none_failed``: a switched-off (skipped) step lets the next
    one run, a failed one stops the batch. After a non-critical step it is ``all_done``, so that its failure
    does not stop the batch; such a task then checks itself that no critical step of its batch failed.
    """
    if not before:
        rule, guard = TriggerRule.ALL_SUCCESS, ()
    elif before[-1][1].critical:
        rule, guard = TriggerRule.NONE_FAILED, ()
    else:
        rule, guard = TriggerRule.ALL_DONE, tuple(s.value for s, c in before if c.critical)

    @task(
        task_id=step.value,
        pool=config.pool,
        pool_slots=config.pool_slots,
        queue=config.celery_queue,
        retries=config.retries,
        execution_timeout=timedelta(seconds=config.timeout_s),
        trigger_rule=rule,
        doc_md=toggle_description(vendor, step),
    )
    def step_task(pipeline_run_id: int, batch_id: int) -> dict[str, Any]:
        return sluice_tasks.run_batch_step(
            vendor, step, pipeline_run_id, batch_id, guard, step_resolver, executor
        )

    return step_task


def _vendor_files(folder: Path) -> dict[str, Path]:
    return {
        path.stem: path
        for path in sorted(folder.iterdir())
        if path.suffix in VENDOR_SUFFIXES and not path.name.startswith(".")
    }
