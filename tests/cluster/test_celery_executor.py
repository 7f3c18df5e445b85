"""A vendor DAG through the scheduler on the CeleryExecutor: Redis as the broker, one worker per queue.

Everything is started by the project's code (pipeline.services): Redis, the local Airflow with the
CeleryExecutor (API server, scheduler, DAG processor, triggerer) and one ``airflow celery worker`` per queue
the vendor's DAG uses. The run is triggered through the REST API as the trigger form does, and every task
instance must have run on the worker of its own queue: its Celery task id is in that worker's log only.
"""

from __future__ import annotations

import contextlib
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from cluster_helpers import opt_in

from pipeline.airflow_local import LocalAirflow
from pipeline.config import VendorConfig, load_vendor
from pipeline.pgserver import LocalPostgres
from pipeline.services.celery import CeleryWorkers, celery_overrides, queues_of
from pipeline.services.redis import LocalRedis
from pipeline.settings import load_settings
from pipeline.synth import RobotDropConfig, make_robot_drop

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.airflow,
    # Opt-in: Redis, Airflow on Celery and a worker per queue, twice, take ~13 min on 2 cores, past what
    # `make test` can spend on one feature inside CI's budget; the billiard fork the workers run tasks in
    # is covered in `make test` by tests/test_processes.py.
    opt_in("runs the Celery executor tests (~13 min on 2 cores)"),
]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def redis() -> Iterator[LocalRedis]:
    server = LocalRedis(Path(tempfile.mkdtemp(prefix="sluice-test-redis-")))
    server.up()
    try:
        yield server
    finally:
        server.down()


@contextlib.contextmanager
def _celery_platform(
    redis: LocalRedis, pg_server: LocalPostgres, tmp_path: Path, drop: RobotDropConfig, stem: str
) -> Iterator[tuple[VendorConfig, LocalAirflow, CeleryWorkers, str]]:
    """A catalog, a vendor on a drop of its own, the local Airflow on Celery and its workers; stopped after."""
    from pipeline.airflow_local import LocalAirflow, metadata_database_url, pools_from_vendors
    from pipeline.catalog import migrate

    catalog = pg_server.create_database(f"{stem}_catalog")
    migrate.upgrade(catalog)
    make_robot_drop(tmp_path / "drop", drop)
    data = yaml.safe_load((REPO / "dags" / "vendors" / "acme_robotics.yaml").read_text())
    data["source"] |= {"url": str(tmp_path / "drop"), "settle_s": 0}
    data["planner"] |= {"batch_stagger_s": 0, "min_splits": 1, "max_splits": 1}
    (tmp_path / "vendors").mkdir()
    (tmp_path / "vendors" / "acme_robotics.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    vendor = load_vendor(tmp_path / "vendors" / "acme_robotics.yaml")
    settings = load_settings(
        home=tmp_path / "home",
        database_url=catalog,
        vendors_dir=tmp_path / "vendors",
        project_dir=REPO,
        store_url=str(tmp_path / "store"),
    )
    metadata = metadata_database_url(settings)
    pools = pools_from_vendors([vendor])
    overrides = celery_overrides(redis.url, metadata)
    # A worker killed with -9 takes its tasks' supervisors along: their heartbeats stop, and the scheduler
    # fails and retries the task after this (300 s by default).
    overrides["scheduler"] = {
        "task_instance_heartbeat_timeout": "20",
        "task_instance_heartbeat_timeout_detection_interval": "5",
    }
    airflow = LocalAirflow.from_settings(settings, metadata_url=metadata, config_overrides=overrides)
    queues = queues_of([vendor], {name: spec.slots for name, spec in pools.items()})
    workers = CeleryWorkers(airflow, {q: min(n, 2) for q, n in queues.items()})
    try:
        airflow.up(pools=pools)
        workers.up()
        yield vendor, airflow, workers, catalog
    finally:
        workers.down()
        airflow.down()


def _task_instances(metadata: str, dag_id: str, run_id: str) -> list[sa.Row[Any]]:
    engine = sa.create_engine(metadata)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    sa.text(
                        "SELECT task_id, map_index, queue, external_executor_id, state, try_number "
                        "FROM task_instance WHERE dag_id = :d AND run_id = :r"
                    ),
                    {"d": dag_id, "r": run_id},
                )
            )
    finally:
        engine.dispose()


def test_a_vendor_run_on_celery_workers_lands_each_task_on_its_queues_worker(
    redis: LocalRedis, pg_server: LocalPostgres, tmp_path: Path
) -> None:
    from pipeline.orchestrate.scheduled import follow_run, run_conf, trigger_run

    drop = RobotDropConfig(episodes=2, seconds=1.5, width=64, height=48)
    with _celery_platform(redis, pg_server, tmp_path, drop, "celery") as (vendor, airflow, workers, _):
        client = airflow.client()
        run_id, was_paused = trigger_run(client, vendor.name, run_conf(vendor))
        run = follow_run(client, vendor.name, run_id, repause=was_paused, timeout_s=900)
        assert run.succeeded, (run.state, run.failures)
        rows = _task_instances(airflow.metadata_url, vendor.name, run_id)
        queues = workers.queues

    logs = {q: workers.worker(q).log_file.read_text(errors="replace") for q in queues}
    ran = [r for r in rows if r.state == "success"]
    assert ran and {r.task_id for r in ran} >= {"discover", "plan", "ingest", "transcode", "finalize"}
    for row in ran:
        expected = (
            vendor.steps[row.task_id].celery_queue
            if row.task_id in set(type(vendor.steps).model_fields)
            else row.queue
        )
        assert row.queue == expected, row
        holders = [
            q for q, text in logs.items() if row.external_executor_id and row.external_executor_id in text
        ]
        assert holders == [row.queue], f"{row.task_id}[{row.map_index}] ran on {holders}, queue {row.queue}"


def test_a_celery_worker_killed_during_transcode_is_survived(
    redis: LocalRedis, pg_server: LocalPostgres, tmp_path: Path
) -> None:
    """kill -9 of the cpu queue's worker while it runs the transcode: the heartbeat timeout fails the try,
    Airflow retries it on the restarted worker, and the run succeeds with every input in one state."""
    from pipeline.orchestrate.scheduled import follow_run, run_conf, trigger_run

    drop = RobotDropConfig(episodes=3, seconds=3.0, width=64, height=48)
    with _celery_platform(redis, pg_server, tmp_path, drop, "celery_kill") as (
        vendor,
        airflow,
        workers,
        catalog,
    ):
        client = airflow.client()
        run_id, was_paused = trigger_run(client, vendor.name, run_conf(vendor))
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            states = {r.task_id: r.state for r in _task_instances(airflow.metadata_url, vendor.name, run_id)}
            if states.get("transcode") == "running":
                break
            time.sleep(0.5)
        assert states.get("transcode") == "running", states
        killed_at = time.monotonic()
        assert workers.worker("cpu").signal(signal.SIGKILL) is not None
        time.sleep(1)
        workers.worker("cpu").start(timeout_s=180)  # the replacement worker for the cpu queue
        run = follow_run(client, vendor.name, run_id, repause=was_paused, timeout_s=900)
        recovered_s = time.monotonic() - killed_at
        rows = _task_instances(airflow.metadata_url, vendor.name, run_id)
    assert run.succeeded, (run.state, run.failures)
    transcode = next(r for r in rows if r.task_id == "transcode")
    assert transcode.state == "success" and transcode.try_number >= 2, transcode
    engine = sa.create_engine(catalog)
    try:
        with engine.connect() as conn:
            per_file = conn.execute(
                sa.text("SELECT source_file_id, count(*) FROM episodes GROUP BY source_file_id")
            ).all()
            steps = dict(
                conn.execute(
                    sa.text("SELECT status, count(*) FROM step_runs WHERE step = 'transcode' GROUP BY status")
                ).all()
            )
    finally:
        engine.dispose()
    assert len(per_file) == 3 and all(n == 1 for _, n in per_file)  # every input one episode, one state
    assert steps == {"succeeded": 3}, steps
    print(
        f"killed cpu worker recovered: transcode try {transcode.try_number}, run done {recovered_s:.0f} s after the kill"
    )
