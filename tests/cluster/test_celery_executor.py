"""A vendor DAG through the scheduler on the CeleryExecutor: Redis as the broker, one worker per queue.

Everything is started by the project's code (pipeline.services): Redis, the local Airflow with the
CeleryExecutor (API server, scheduler, DAG processor, triggerer) and one ``airflow celery worker`` per queue
the vendor's DAG uses. The run is triggered through the REST API as the trigger form does, and every task
instance must have run on the worker of its own queue: its Celery task id is in that worker's log only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from pipeline.config import load_vendor
from pipeline.pgserver import LocalPostgres
from pipeline.services.celery import CeleryWorkers, celery_overrides, queues_of
from pipeline.services.redis import LocalRedis
from pipeline.settings import load_settings
from pipeline.synth import RobotDropConfig, make_robot_drop

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.airflow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def redis() -> Iterator[LocalRedis]:
    server = LocalRedis(Path(tempfile.mkdtemp(prefix="sluice-test-redis-")))
    server.up()
    try:
        yield server
    finally:
        server.down()


def test_a_vendor_run_on_celery_workers_lands_each_task_on_its_queues_worker(
    redis: LocalRedis, pg_server: LocalPostgres, tmp_path: Path
) -> None:
    from pipeline.airflow_local import LocalAirflow, metadata_database_url, pools_from_vendors
    from pipeline.catalog import migrate
    from pipeline.orchestrate.scheduled import follow_run, run_conf, trigger_run

    catalog = pg_server.create_database("celery_catalog")
    migrate.upgrade(catalog)
    make_robot_drop(tmp_path / "drop", RobotDropConfig(episodes=2, seconds=1.5, width=64, height=48))
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
    airflow = LocalAirflow.from_settings(
        settings, metadata_url=metadata, config_overrides=celery_overrides(redis.url, metadata)
    )
    queues = queues_of([vendor], {name: spec.slots for name, spec in pools.items()})
    workers = CeleryWorkers(airflow, {q: min(n, 2) for q, n in queues.items()})
    try:
        airflow.up(pools=pools)
        workers.up()
        client = airflow.client()
        run_id, was_paused = trigger_run(client, vendor.name, run_conf(vendor))
        run = follow_run(client, vendor.name, run_id, repause=was_paused, timeout_s=900)
        assert run.succeeded, (run.state, run.failures)
        engine = sa.create_engine(metadata)
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT task_id, map_index, queue, external_executor_id, state FROM task_instance "
                    "WHERE dag_id = :d AND run_id = :r"
                ),
                {"d": vendor.name, "r": run_id},
            ).all()
        engine.dispose()
    finally:
        workers.down()
        airflow.down()

    logs = {q: workers.worker(q).log_file.read_text(errors="replace") for q in queues}
    ran = [r for r in rows if r.state == "success"]
    assert ran and {r.task_id for r in ran} >= {"discover", "plan", "ingest", "transcode", "finalize"}
    for row in ran:
        expected = (
            vendor.steps[row.task_id].celery_queue
            if row.task_id in set(vendor.steps.model_fields)
            else row.queue
        )
        assert row.queue == expected, row
        holders = [
            q for q, text in logs.items() if row.external_executor_id and row.external_executor_id in text
        ]
        assert holders == [row.queue], f"{row.task_id}[{row.map_index}] ran on {holders}, queue {row.queue}"
