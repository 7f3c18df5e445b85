"""One run of a vendor DAG without the scheduler, through ``airflow dags test`` of the local Airflow.

``make demo`` and ``sluice bench e2e`` run the real DAG files of ``dags/`` this way: the DAG is parsed from
the DAG folder, a DagRun is created in the metadata DB and every task runs in the one ``airflow`` process,
in dependency order, with the same task code, toggles and catalog records as under the scheduler. What it
does not do is honour pools or run tasks in parallel (``dag.test()`` ignores both); the scheduler is
exercised by ``sluice airflow up`` and the pool test.

The output of ``airflow dags test`` (the log of every task) is kept in a file under the Airflow home; the
states of the run and of its task instances are read back from the metadata DB.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.airflow_local import AirflowLocalError, LocalAirflow
from pipeline.orchestrate.airflow_client import TaskInstanceTimes

log = logging.getLogger(__name__)

#: A demo-sized run takes well under a minute here; a run that takes an hour is stuck.
DAG_TEST_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class DagTestRun:
    """What one ``airflow dags test`` run left in the metadata DB."""

    dag_id: str
    run_id: str
    state: str
    seconds: float
    log_path: Path
    task_instances: tuple[TaskInstanceTimes, ...]

    @property
    def succeeded(self) -> bool:
        return self.state == "success"

    def task_states(self) -> dict[str, Counter[str]]:
        """task id → how many of its (mapped) instances ended in each state, in the DAG's task order."""
        ordered = sorted(self.task_instances, key=lambda ti: (ti.start_s or float("inf"), ti.map_index))
        states: dict[str, Counter[str]] = {}
        for ti in ordered:
            states.setdefault(ti.task_id, Counter())[ti.state or "none"] += 1
        return states


def run_dag(
    airflow: LocalAirflow,
    dag_id: str,
    *,
    conf: Mapping[str, Any] | None = None,
    timeout_s: float = DAG_TEST_TIMEOUT_S,
) -> DagTestRun:
    """Run ``dag_id`` once, now, with ``conf`` as the trigger form would pass it; wait for it to end.

    The metadata DB must be migrated (:meth:`LocalAirflow.migrate`). A failed run is returned, not raised:
    its task states say what failed and the log file says why. A DAG that cannot be found or parsed, or a
    run that does not end within ``timeout_s``, raises :class:`AirflowLocalError`.
    """
    started_at = datetime.now(UTC)
    log_dir = airflow.home / "logs" / "dags-test"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{dag_id}-{started_at:%Y%m%dT%H%M%S.%fZ}.log"
    # An explicit logical date names this run among any others of the DAG (a scheduler may be running too).
    logical_date = started_at.isoformat(timespec="microseconds")
    command = [
        "dags",
        "test",
        dag_id,
        logical_date,
        "--conf",
        json.dumps(dict(conf or {})),
    ]
    started = time.perf_counter()
    with log_path.open("wb") as out:
        try:
            done = airflow.run(
                command, timeout_s=timeout_s, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        except AirflowLocalError as exc:
            raise AirflowLocalError(f"{exc}; see {log_path}") from exc
    seconds = time.perf_counter() - started
    run = _run_of(airflow, dag_id, logical_date=started_at)
    if run is None:
        tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-15:])
        raise AirflowLocalError(
            f"`airflow dags test {dag_id}` exited {done.returncode} without creating a run "
            f"(log {log_path}):\n{tail}"
        )
    run_id, state = run
    task_instances = tuple(airflow.client().task_instances(dag_id, run_id))
    log.info("dag %s run %s: %s in %.1f s (log %s)", dag_id, run_id, state, seconds, log_path)
    return DagTestRun(dag_id, run_id, state, seconds, log_path, task_instances)


def _run_of(airflow: LocalAirflow, dag_id: str, *, logical_date: datetime) -> tuple[str, str] | None:
    """(run id, state) of the run of ``dag_id`` at ``logical_date``, if ``airflow dags test`` made one."""
    from sqlalchemy import create_engine, text

    engine = create_engine(airflow.metadata_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT run_id, state, logical_date FROM dag_run WHERE dag_id = :dag_id ORDER BY id DESC"
                ),
                {"dag_id": dag_id},
            ).all()
    finally:
        engine.dispose()
    for run_id, state, when in rows:
        recorded = _as_utc(when)
        if recorded is not None and abs((recorded - logical_date).total_seconds()) < 1e-3:
            return str(run_id), str(state)
    return None


def _as_utc(value: datetime | str | None) -> datetime | None:
    """SQLite hands back timestamps as naive datetimes or strings; Postgres as aware datetimes."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
