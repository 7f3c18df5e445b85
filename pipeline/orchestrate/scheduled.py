"""One run of a vendor's DAG through the scheduler, as the trigger form starts it: ``sluice run`` and the demo.

:func:`run_conf` turns ``--steps``/``--conf`` into the run's conf the way the trigger form fills it (every
step's toggle, the vendor's defaults where nothing was said, unknown keys refused before anything is
triggered). :func:`trigger_run` posts it to the REST API; a paused DAG is unpaused for the run, because
the scheduler starts no run of a paused DAG, and :func:`follow_run` pauses it again once the run ended.
:func:`follow_run` polls the run's task instances, reports every state change, and on the way out reads
why each failed task failed: the exception its log ends with, and the failed items the catalog recorded.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipeline.errors import ConfigError, InfrastructureError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pipeline.config import VendorConfig
    from pipeline.orchestrate.airflow_client import AirflowClient

log = logging.getLogger(__name__)

#: A run's state as the API reports it once it has ended.
FINISHED = ("success", "failed")
#: Task states that end a task instance (``up_for_retry`` and ``up_for_reschedule`` do not).
TASK_FINISHED = ("success", "failed", "skipped", "upstream_failed", "removed")
POLL_S = 1.0
#: A new vendor file becomes a DAG at the DAG processor's next pass over the DAG folder.
DAG_APPEAR_TIMEOUT_S = 180.0


class RunTimeoutError(InfrastructureError):
    """The run did not end within the time allowed."""


@dataclass(frozen=True)
class TaskChange:
    """A task instance reached a new state."""

    task: str  # ``ingest[1]`` for a mapped instance
    state: str
    try_number: int
    at_s: float  # seconds since the run was triggered


@dataclass(frozen=True)
class TaskFailure:
    task: str
    state: str
    error: str | None  # the exception its log ends with


@dataclass(frozen=True)
class ScheduledRun:
    """One run of a DAG through the scheduler, as it ended."""

    dag_id: str
    run_id: str
    state: str
    seconds: float
    task_instances: tuple[dict[str, Any], ...]
    failures: tuple[TaskFailure, ...] = ()
    failed_items: tuple[dict[str, Any], ...] = ()  # the catalog's failed step runs of this run
    outcome: str | None = None  # the catalog's pipeline-run outcome
    warnings: tuple[dict[str, Any], ...] = field(default=())

    @property
    def succeeded(self) -> bool:
        return self.state == "success"

    def task_states(self) -> dict[str, Counter[str]]:
        """task id -> how many of its (mapped) instances ended in each state, in start order."""
        ordered = sorted(self.task_instances, key=lambda ti: (ti.get("start_date") or "~", ti["map_index"]))
        states: dict[str, Counter[str]] = {}
        for ti in ordered:
            states.setdefault(ti["task_id"], Counter())[ti["state"] or "none"] += 1
        return states

    def span_s(self) -> float | None:
        """Seconds from the first task instance's start to the last one's end (None before any ran)."""
        starts = [t for ti in self.task_instances if (t := _when(ti.get("start_date"))) is not None]
        ends = [t for ti in self.task_instances if (t := _when(ti.get("end_date"))) is not None]
        if not starts or not ends:
            return None
        return (max(ends) - min(starts)).total_seconds()

    def queue_latency_s(self) -> list[float]:
        """Seconds each task instance waited between being queued and running (the scheduler's latency)."""
        waits = []
        for ti in self.task_instances:
            queued, started = _when(ti.get("queued_when")), _when(ti.get("start_date"))
            if queued is not None and started is not None:
                waits.append(max(0.0, (started - queued).total_seconds()))
        return waits


def run_conf(
    vendor: VendorConfig, *, steps: Sequence[str] | None = None, conf: Mapping[str, Any] | None = None
) -> dict[str, bool]:
    """The conf the trigger form would send: one boolean per step.

    ``steps`` lists the steps to run (all others off); ``conf`` sets single toggles on top. Unknown step
    names and keys are refused (:class:`~pipeline.errors.ConfigError`), before anything is triggered, and so
    is a conf that leaves every step off: such a run would do nothing and still end green.
    """
    from pipeline.orchestrate.toggles import ALLOWED_CONF_KEYS, validate_conf

    allowed = ", ".join(ALLOWED_CONF_KEYS)
    chosen: dict[str, Any] = {}
    if steps is not None:
        unknown = [s for s in steps if s not in ALLOWED_CONF_KEYS]
        if unknown:
            raise ConfigError("--steps", [(s, f"unknown step {s!r}; allowed: {allowed}") for s in unknown])
        chosen = {step: step in steps for step in ALLOWED_CONF_KEYS}
    chosen.update(conf or {})
    return validate_conf(vendor, chosen)  # refuses a run with every step off


def trigger_run(
    client: AirflowClient,
    dag_id: str,
    conf: Mapping[str, Any],
    *,
    appear_timeout_s: float = DAG_APPEAR_TIMEOUT_S,
) -> tuple[str, bool]:
    """Start a run of ``dag_id`` now with ``conf``; returns ``(run id, whether the DAG was paused)``.

    Waits for the DAG to be registered first; when it does not appear, the DAG processor's import errors
    are part of the message.
    """
    try:
        client.wait_for_dags([dag_id], timeout_s=appear_timeout_s)
    except InfrastructureError as exc:
        errors = client.api_import_errors()
        detail = "; ".join(f"{f}: {t.strip().splitlines()[-1]}" for f, t in errors.items()) or "none"
        raise InfrastructureError(f"{exc}; DAG import errors: {detail}") from None
    paused = bool(client.dag(dag_id)["is_paused"])
    if paused:
        # The scheduler starts no run of a paused DAG. The schedule waits for its next cron time, so
        # unpausing starts nothing else (dags/sluice_factory.schedule_of).
        client.set_paused(dag_id, False)
    run_id = client.trigger(dag_id, conf)
    log.info("triggered %s run %s with %s", dag_id, run_id, json.dumps(dict(conf)))
    return run_id, paused


def follow_run(
    client: AirflowClient,
    dag_id: str,
    run_id: str,
    *,
    on_change: Callable[[TaskChange], None] | None = None,
    timeout_s: float | None = None,
    repause: bool = False,
    catalog: Engine | None = None,
) -> ScheduledRun:
    """Poll the run until it ends, calling ``on_change`` for every task state change; return how it ended.

    ``repause`` pauses the DAG again once the run has ended (it was paused before :func:`trigger_run`); a
    run still going when following stops (a timeout, an interrupt) leaves it unpaused, since a paused DAG's
    scheduler starts none of the run's next tasks and the run would hang. ``catalog`` (the catalog's
    engine) adds the pipeline run's outcome and failed items to the result.
    """
    started = time.monotonic()
    seen: dict[tuple[str, int], tuple[str, int]] = {}
    state = ""
    try:
        while True:
            state = str(client.run(dag_id, run_id)["state"])
            tis = client.run_task_instances(dag_id, run_id)
            for change in _changes(tis, seen, time.monotonic() - started):
                if on_change is not None:
                    on_change(change)
            if state in FINISHED:
                break
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                waiting = Counter(
                    f"{ti['task_id']} {ti['state'] or 'none'}"
                    for ti in tis
                    if ti["state"] not in TASK_FINISHED
                )
                raise RunTimeoutError(
                    f"run {dag_id}/{run_id} did not end within {timeout_s:g} s; unfinished: "
                    + ", ".join(f"{n} {what}" for what, n in sorted(waiting.items()))
                    + (f"; {dag_id} stays unpaused until the run ends" if repause else "")
                )
            time.sleep(POLL_S)
    finally:
        if repause and state in FINISHED:
            client.set_paused(dag_id, True)
    failures = tuple(
        TaskFailure(
            _label(ti),
            ti["state"],
            client.task_error(dag_id, run_id, ti["task_id"], ti["map_index"], ti["try_number"])
            if ti["state"] == "failed"
            else None,
        )
        for ti in tis
        if ti["state"] in ("failed", "upstream_failed")
    )
    outcome, warnings, items = (
        _catalog_view(catalog, dag_id, run_id) if catalog is not None else (None, (), ())
    )
    return ScheduledRun(
        dag_id,
        run_id,
        state,
        time.monotonic() - started,
        tuple(tis),
        failures,
        items,
        outcome,
        warnings,
    )


def _label(ti: Mapping[str, Any]) -> str:
    return f"{ti['task_id']}[{ti['map_index']}]" if ti["map_index"] >= 0 else str(ti["task_id"])


def _changes(
    tis: Iterable[Mapping[str, Any]], seen: dict[tuple[str, int], tuple[str, int]], at_s: float
) -> list[TaskChange]:
    out = []
    for ti in tis:
        if not ti["state"]:
            continue
        key, now = (ti["task_id"], ti["map_index"]), (ti["state"], ti["try_number"])
        if seen.get(key) != now:
            seen[key] = now
            out.append(TaskChange(_label(ti), ti["state"], ti["try_number"], round(at_s, 1)))
    return out


def _catalog_view(
    engine: Engine, dag_id: str, run_id: str
) -> tuple[str | None, tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """The pipeline run's outcome, warnings and failed step runs (with their recorded detail)."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Episode, PipelineRun, SourceFile, StepRun
    from pipeline.enums import StepStatus

    with session_scope(make_session_factory(engine)) as session:
        run = session.execute(
            select(PipelineRun.id, PipelineRun.outcome, PipelineRun.warnings).where(
                PipelineRun.dag_id == dag_id, PipelineRun.run_id == run_id
            )
        ).one_or_none()
        if run is None:
            return None, (), ()
        rows = session.execute(
            select(StepRun.step, SourceFile.path, StepRun.detail)
            .join(Episode, Episode.id == StepRun.episode_id)
            .join(SourceFile, SourceFile.id == Episode.source_file_id)
            .where(StepRun.pipeline_run_id == run.id, StepRun.status == StepStatus.FAILED.value)
            .order_by(StepRun.step, SourceFile.path)
        ).all()
    items = tuple({"step": r.step, "path": r.path, "detail": r.detail} for r in rows)
    return run.outcome, tuple(run.warnings or ()), items


def _when(text: str | None) -> datetime | None:
    if not text:
        return None
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


__all__ = [
    "RunTimeoutError",
    "ScheduledRun",
    "TaskChange",
    "TaskFailure",
    "follow_run",
    "run_conf",
    "trigger_run",
]
