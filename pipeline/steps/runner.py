"""Run a step over a batch's items, locally or on Ray, recording every outcome in the catalog.

Resume is built in: an item whose episode already has a final step run (succeeded or rejected) under the
step's config hash is skipped, so clearing a failed Airflow task and running it again continues where it
stopped. Two runs of one vendor at once (two ingests, an ingest beside a DAG run) share the work: each
item is processed under a claim (:func:`claimed`), and an item another worker finished meanwhile is skipped.
A bad item is recorded as ``rejected`` and the batch goes on; an infrastructure fault on an item is
recorded as ``failed``, the other items still run, and the runner then raises :class:`StepFailedError` so
that the orchestrator retries the task (the retry redoes only what is not final).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from pipeline.enums import StepName, StepStatus
from pipeline.errors import InfrastructureError, InputError, SluiceError
from pipeline.steps.base import Step, StepContext, StepResult, WorkItem

if TYPE_CHECKING:
    from pipeline.config import VendorConfig
    from pipeline.settings import Settings

#: Where a step runs its items: this process and its workers, or the Ray cluster at ``ray_address``.
EXECUTORS = ("local", "ray")

log = logging.getLogger(__name__)

#: How long a Ray runner waits for one item before calling the batch stuck. A request whose resources no
#: node can offer waits forever in Ray, so every wait is bounded.
DEFAULT_ITEM_TIMEOUT_S = 1800.0


class StepFailedError(InfrastructureError):
    """Some items hit infrastructure faults; the task should be retried (finished items are kept)."""

    def __init__(self, step: str, failures: Sequence[dict[str, Any]]) -> None:
        self.failures = list(failures)
        first = "; ".join(f"{f['key']}: {f['detail']}" for f in self.failures[:3])
        super().__init__(f"{step}: {len(self.failures)} item(s) failed: {first}")


@dataclass
class StepSummary:
    """Counts of one step over one batch; what a DAG task returns through XCom."""

    step: str
    succeeded: int = 0
    rejected: int = 0
    skipped: int = 0
    failed: int = 0
    seconds: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)
    episode_ids: list[int] = field(default_factory=list)
    ray_nodes: dict[str, int] = field(default_factory=dict)  # Ray node id -> items it ran

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "succeeded": self.succeeded,
            "rejected": self.rejected,
            "skipped": self.skipped,
            "failed": self.failed,
            "seconds": round(self.seconds, 3),
            "episode_ids": sorted(self.episode_ids),
            "ray_nodes": dict(self.ray_nodes),
        }


def build_context(settings: Settings, *, code_version: str | None = None) -> StepContext:
    """Clients for a worker process, built once from settings (the entry point's job, never a step's).

    The catalog engine connects as the ingest role (:func:`pipeline.catalog.roles.step_database_url`),
    never as the catalog's owner: a step may add history, not rewrite it.
    """
    from pipeline.catalog import make_engine
    from pipeline.catalog.roles import step_database_url
    from pipeline.store import Store
    from pipeline.version import code_version as current_code_version

    return StepContext(
        settings=settings,
        engine=make_engine(step_database_url(settings)),
        store=Store(settings.store, verify=settings.store_verify),
        code_version=code_version or current_code_version(),
    )


def run_step(
    step: Step,
    items: Sequence[WorkItem],
    *,
    pipeline_run_id: int | None = None,
    batch_id: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    item_timeout_s: float = DEFAULT_ITEM_TIMEOUT_S,
) -> StepSummary:
    """Process ``items`` with ``step``; record each outcome; raise StepFailedError if any item failed."""
    started = time.monotonic()
    summary = StepSummary(step=step.name.value)
    todo = []
    for item in step.items(items):
        if item.episode_id is not None and _already_final(step, item.episode_id):
            summary.skipped += 1
            summary.episode_ids.append(item.episode_id)
        else:
            todo.append(item)
    if todo:
        if executor == "local":
            results = _run_local(step, todo, pipeline_run_id, batch_id)
        elif executor == "ray":
            results = _run_ray(
                step, todo, pipeline_run_id, batch_id, ray_address, item_timeout_s, summary.ray_nodes
            )
        else:
            from pipeline.errors import UnknownChoiceError

            raise UnknownChoiceError("executor", executor, EXECUTORS)
        for item, result in zip(todo, results, strict=True):
            _tally(summary, item, result)
    summary.seconds = time.monotonic() - started
    log.info("%s: %s", step.name, summary.as_dict())
    if summary.failed:
        raise StepFailedError(step.name.value, summary.failures)
    return summary


def process_and_record(
    step: Step, item: WorkItem, pipeline_run_id: int | None, batch_id: int | None
) -> StepResult:
    """Run one item through ``step`` and record the outcome (used by both executors)."""
    if item.episode_id is not None:
        _record(step, item.episode_id, StepStatus.RUNNING, None, None, pipeline_run_id, batch_id)
    try:
        result = step.process(item)
    except InputError as exc:
        from pipeline.enums import ReasonCode

        result = StepResult.rejected(ReasonCode(exc.reason), exc.detail, episode_id=item.episode_id)
    except Exception as exc:
        log.exception("%s failed on %s", step.name, item.key)
        result = StepResult(
            StepStatus.FAILED, detail=f"{type(exc).__name__}: {exc}", episode_id=item.episode_id
        )
    episode_id = result.episode_id if result.episode_id is not None else item.episode_id
    if episode_id is not None:
        try:
            _record(step, episode_id, result.status, result.reason, result.detail, pipeline_run_id, batch_id)
        except SluiceError as exc:
            result = StepResult(StepStatus.FAILED, detail=str(exc), episode_id=episode_id)
    return result


def _tally(summary: StepSummary, item: WorkItem, result: StepResult) -> None:
    if result.episode_id is not None or item.episode_id is not None:
        summary.episode_ids.append(result.episode_id if result.episode_id is not None else item.episode_id)  # type: ignore[arg-type]
    if result.status is StepStatus.SUCCEEDED:
        summary.succeeded += 1
    elif result.status is StepStatus.REJECTED:
        summary.rejected += 1
    elif result.status is StepStatus.SKIPPED:
        summary.skipped += 1
    else:
        summary.failed += 1
        summary.failures.append({"key": item.key, "detail": result.detail or "failed"})


def _already_final(step: Step, episode_id: int) -> bool:
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.runs import FINAL_STEP_STATUSES, step_status

    with session_scope(make_session_factory(step.ctx.engine)) as session:
        status = step_status(session, episode_id=episode_id, step=step.name, config_hash=step.config_hash)
    return status in FINAL_STEP_STATUSES


def _record(
    step: Step,
    episode_id: int,
    status: StepStatus,
    reason: Any,
    detail: str | None,
    pipeline_run_id: int | None,
    batch_id: int | None,
) -> None:
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.runs import record_step_run

    with session_scope(make_session_factory(step.ctx.engine)) as session:
        record_step_run(
            session,
            episode_id=episode_id,
            step=step.name,
            config_hash=step.config_hash,
            status=status,
            reason=reason,
            detail=detail,
            pipeline_run_id=pipeline_run_id,
            batch_id=batch_id,
        )


#: High byte of the session advisory lock (``pg_advisory_lock(bigint)``) a worker holds on the (episode, step)
#: it is processing. Postgres keeps bigint keys apart from the int4-pair keys the other modules lock; the
#: migration lock's bigint is below 2**32.
CLAIM_NAMESPACE = 0x5C
#: Low bits of the claim key that hold the step (StepName has fewer members).
CLAIM_STEP_BITS = 4


class Claim(Enum):
    """What a worker found when it claimed an item (:func:`claimed`)."""

    MINE = "mine"  # held: process it
    DONE = "done"  # another worker finished it meanwhile: skip it
    BUSY = "busy"  # another worker holds it now (only without waiting)


@contextmanager
def claimed(step: Step, item: WorkItem, *, wait: bool) -> Iterator[Claim]:
    """Claim ``item`` for this worker while the block runs, so that two runs of one vendor at once (two
    ingests, an ingest beside a DAG run) process each episode once between them instead of once each.

    With ``wait``, a claim another worker holds is waited for, then re-checked: if that worker failed or
    died the item is this worker's. Items without an episode (files to land) are always MINE: landing is
    idempotent. The claim is a session-level advisory lock on a connection of its own (no transaction
    stays open while the item runs); a killed worker's claim goes with its connection."""
    from sqlalchemy import func, select

    if item.episode_id is None:
        yield Claim.MINE
        return
    step_index = list(StepName).index(step.name)
    assert step_index < 1 << CLAIM_STEP_BITS
    key = (CLAIM_NAMESPACE << 56) | (item.episode_id << CLAIM_STEP_BITS) | step_index
    with step.ctx.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if wait:
            conn.execute(select(func.pg_advisory_lock(key)))
        elif not conn.execute(select(func.pg_try_advisory_lock(key))).scalar_one():
            yield Claim.BUSY
            return
        try:
            yield Claim.DONE if _already_final(step, item.episode_id) else Claim.MINE
        finally:
            conn.execute(select(func.pg_advisory_unlock(key)))


def _exclusively(
    step: Step, item: WorkItem, pipeline_run_id: int | None, batch_id: int | None, *, wait: bool
) -> StepResult | None:
    """The item processed and recorded under its claim; skipped when another worker finished it; None
    when another worker holds it (only without ``wait``)."""
    with claimed(step, item, wait=wait) as claim:
        if claim is Claim.BUSY:
            return None
        if claim is Claim.DONE:
            return StepResult(StepStatus.SKIPPED, detail="done by another worker", episode_id=item.episode_id)
        return process_and_record(step, item, pipeline_run_id, batch_id)


def _run_local(
    step: Step, items: Sequence[WorkItem], pipeline_run_id: int | None, batch_id: int | None
) -> list[StepResult]:
    step.setup()
    try:
        first = [_exclusively(step, item, pipeline_run_id, batch_id, wait=False) for item in items]
        # Items another worker was on are taken last, waiting for it: it may fail or die on them.
        return [
            done if done is not None else _waited(step, item, pipeline_run_id, batch_id)
            for item, done in zip(items, first, strict=True)
        ]
    finally:
        step.close()


def _waited(step: Step, item: WorkItem, pipeline_run_id: int | None, batch_id: int | None) -> StepResult:
    result = _exclusively(step, item, pipeline_run_id, batch_id, wait=True)
    assert result is not None
    return result


class _RayWorker:
    """One Ray actor: builds its own clients and step once (``setup``), then processes items."""

    def __init__(self, step_name: str, vendor: VendorConfig, settings: Settings, code_version: str) -> None:
        from pipeline.enums import StepName
        from pipeline.steps.registry import step_class

        ctx = build_context(settings, code_version=code_version)
        self.step = step_class(StepName(step_name))(vendor, ctx)
        self.step.setup()

    def process(
        self, item: WorkItem, pipeline_run_id: int | None, batch_id: int | None
    ) -> tuple[StepResult, str]:
        """The item's result and the id of the Ray node it ran on (logged, and counted per node). An actor
        waits for a claim another run holds: the other actors go on with the other items."""
        import ray

        result = _waited(self.step, item, pipeline_run_id, batch_id)
        return result, ray.get_runtime_context().get_node_id()


#: How often one item goes to another worker after the worker holding it died (its node killed, its
#: process OOM-killed). Re-processing is safe: outputs are published atomically and step runs are upserts.
RAY_ITEM_ATTEMPTS = 3


def _run_ray(
    step: Step,
    items: Sequence[WorkItem],
    pipeline_run_id: int | None,
    batch_id: int | None,
    ray_address: str | None,
    item_timeout_s: float,
    nodes: dict[str, int] | None = None,
) -> list[StepResult]:
    """Items on a pool of actors sized to what the cluster fits; ``nodes`` counts the items per node id.

    An actor that dies (its node lost) takes no more items; its item goes back to the queue for a live
    actor, or for a new one when none is left (Ray places it where the request fits, once a node can).
    An actor whose creation raised (its step's setup, or building its clients) is no lost node: a new one
    would fail the same way, so its item fails once, with the cause's type and first line, and no actor
    replaces it; the items left when no actor is, fail with that cause too.
    """
    import ray

    from pipeline.raycluster import ensure_ray, workers_that_fit

    ensure_ray(ray_address)
    res = step.resources
    n_workers = workers_that_fit(res, len(items))
    actor_cls = ray.remote(num_cpus=res.cpus, num_gpus=res.gpus, memory=res.memory_bytes, max_restarts=0)(
        _RayWorker
    )

    def new_actor() -> Any:
        return actor_cls.remote(step.name.value, step.vendor, step.ctx.settings, step.ctx.code_version)

    actors = [new_actor() for _ in range(n_workers)]
    pending: dict[Any, int] = {}
    results: list[StepResult | None] = [None] * len(items)
    attempts = [0] * len(items)
    queue = list(enumerate(items))
    idle = list(actors)
    actor_of: dict[int, Any] = {}
    setup_failure: str | None = None  # the detail of the last actor whose creation raised

    def submit() -> None:
        if queue and not idle and not pending and setup_failure:  # no actor could start: none will
            while queue:
                index, item = queue.pop(0)
                results[index] = StepResult(
                    StepStatus.FAILED, detail=setup_failure, episode_id=item.episode_id
                )
        if queue and not idle and not pending:  # every actor died: start one for what is left
            actor = new_actor()
            actors.append(actor)
            idle.append(actor)
        while idle and queue:
            index, item = queue.pop(0)
            actor = idle.pop()
            attempts[index] += 1
            pending[actor.process.remote(item, pipeline_run_id, batch_id)] = index
            actor_of[index] = actor

    submit()
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=item_timeout_s)
            if not done:
                raise InfrastructureError(
                    f"{step.name}: no item finished within {item_timeout_s:g} s on Ray "
                    f"({len(pending)} running, {len(queue)} queued); is the cluster big enough for "
                    f"{res.cpus} CPUs and {res.memory_bytes} bytes per worker?"
                )
            ref = done[0]
            index = pending.pop(ref)
            actor = actor_of.pop(index)
            try:
                result, node_id = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                if exc.actor_init_failed:
                    detail = f"ray: the worker could not start: {creation_cause(exc)}"
                    if setup_failure is None:
                        log.error(
                            "%s: %s; its items fail without a retry (another worker would fail the same "
                            "way; the full traceback is logged at DEBUG)",
                            step.name,
                            detail,
                        )
                        log.debug("%s: the Ray worker's creation failed: %s", step.name, exc)
                    setup_failure = detail
                    results[index] = StepResult(
                        StepStatus.FAILED, detail=detail, episode_id=items[index].episode_id
                    )
                elif attempts[index] < RAY_ITEM_ATTEMPTS:
                    log.warning(
                        "%s: the Ray worker holding %s died (%s); the item goes to another worker",
                        step.name,
                        items[index].key,
                        type(exc).__name__,
                    )
                    queue.insert(0, (index, items[index]))
                else:
                    results[index] = StepResult(
                        StepStatus.FAILED,
                        detail=f"ray: its worker died {attempts[index]} times: {exc}",
                        episode_id=items[index].episode_id,
                    )
                submit()
                continue
            except ray.exceptions.RayError as exc:
                results[index] = StepResult(
                    StepStatus.FAILED, detail=f"ray: {exc}", episode_id=items[index].episode_id
                )
            else:
                results[index] = result
                log.info("%s: %s ran on Ray node %s", step.name, items[index].key, node_id)
                if nodes is not None:
                    nodes[node_id] = nodes.get(node_id, 0) + 1
            idle.append(actor)
            submit()
    finally:
        for actor in actors:
            ray.kill(actor)
    return [r for r in results if r is not None]


#: The line of a Python traceback that names the exception: ``botocore.exceptions.NoCredentialsError:
#: Unable to locate credentials`` (its module path optional, its message absent for a bare ``KeyError``).
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning))(?:: (?P<message>.*))?$"
)


def creation_cause(exc: BaseException) -> str:
    """``Type: first line`` of what an actor's creation task raised, from the error Ray gives its callers.

    That error carries the creation task's formatted traceback as text only (Ray keeps no exception object
    of it); the last line naming an exception is the one raised last, the cause of a chain.
    """
    lines = str(exc).splitlines()
    for line in reversed(lines):
        match = _EXCEPTION_LINE.match(line)
        if match:
            message = (match["message"] or "").strip()
            return f"{match['name']}: {message}" if message else match["name"]
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return last or type(exc).__name__
