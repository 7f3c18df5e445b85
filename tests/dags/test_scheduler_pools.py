"""A real scheduler (not ``dag.test()``, which ignores pools) keeps every pool within its slots.

One local Airflow (API server, scheduler, DAG processor, triggerer, LocalExecutor) is started by
:class:`pipeline.airflow_local.LocalAirflow` with a vendor whose four batches all want to run at once: ingest
on ``io`` (2 slots), quality_pre on ``cpu`` (2 slots) and transcode on ``cpu`` taking both of its slots.
The steps work a fixed time per batch (:mod:`pipeline.bench.stagger`'s timed steps). Slot usage is read
back from the metadata DB's task-instance start and end times. The same start-up also shows the real DAG
processor keeping a broken vendor file's import error away from the good vendor's DAG.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dag_helpers import REPO_DAGS
from sqlalchemy import text

from pipeline.airflow_local import LocalAirflow, pools_from_vendors
from pipeline.bench.stagger import SIMULATED_BYTES_PER_S
from pipeline.config import load_vendor
from pipeline.orchestrate.airflow_client import peak_pool_slots

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.slow]

BATCHES = 4
STEP_S = 2.0
DAG_FILE = '''"""Airflow DAGs of the pool test: its vendors, with the bench's timed steps."""

from sluice_factory import vendor_dags

globals().update(vendor_dags(step_resolver="pipeline.bench.stagger:step_class", executor="local"))
'''
CHECK_FILE = '''"""Airflow import errors for the pool test's broken vendor files (no DAG)."""

from sluice_factory import check_vendor_files

check_vendor_files()
'''
VENDOR = f"""\
name: pools_demo
kind: mcap
description: Four batches that all want to run at once.
source: {{url: DROP, include: ['*.mcap'], settle_s: 0}}
topics: {{}}
planner: {{min_splits: {BATCHES}, max_splits: {BATCHES}, batch_stagger_s: 0}}
pools:
  cpu: {{slots: 2}}
  io: {{slots: 2}}
steps:
  ingest: {{pool: io, pool_slots: 1, retries: 0}}
  quality_pre: {{pool: cpu, pool_slots: 1, retries: 0}}
  transcode: {{pool: cpu, pool_slots: 2, retries: 0}}
  quality_post: {{enabled: false}}
  annotate: {{enabled: false}}
  shard: {{enabled: false}}
"""


@pytest.fixture
def airflow(tmp_path: Path, migrated_database_url: str) -> Iterator[LocalAirflow]:
    tmp_path.chmod(0o755)
    drop, vendors, dags = tmp_path / "drop", tmp_path / "vendors", tmp_path / "dags"
    for folder in (drop, vendors, dags):
        folder.mkdir()
    for index in range(BATCHES):
        pattern = index.to_bytes(4, "big")
        (drop / f"file_{index}.mcap").write_bytes(pattern * int(STEP_S * SIMULATED_BYTES_PER_S / 4))
    (vendors / "pools_demo.yaml").write_text(VENDOR.replace("DROP", str(drop)))
    # Broken: transcode asks for more slots than its pool has.
    (vendors / "broken_demo.yaml").write_text(
        VENDOR.replace("pools_demo", "broken_demo").replace("pool_slots: 2", "pool_slots: 3")
    )
    (dags / "pool_test_dags.py").write_text(DAG_FILE)
    (dags / "vendor_config_check.py").write_text(CHECK_FILE)
    local = LocalAirflow(
        tmp_path / "airflow",
        sluice_env={
            "SLUICE_HOME": str(tmp_path / "home"),
            "SLUICE_DATABASE_URL": migrated_database_url,
            "SLUICE_STORE_URL": str(tmp_path / "store"),
            "SLUICE_VENDORS_DIR": str(vendors),
            "SLUICE_PROJECT_DIR": str(tmp_path),
        },
        dags_folder=dags,
        extra_python_path=[REPO_DAGS],
        parallelism=8,
        config_overrides={"core": {"dags_are_paused_at_creation": "False"}},
    )
    try:
        local.up(pools=pools_from_vendors([load_vendor(vendors / "pools_demo.yaml")]))
        yield local
    finally:
        local.down()
        assert not local.status().running


def test_no_pool_ever_runs_more_tasks_than_its_slots(airflow: LocalAirflow) -> None:
    client = airflow.client()
    client.wait_for_dags(["pools_demo"])
    run_id = client.trigger("pools_demo")
    assert client.wait_for_run("pools_demo", run_id, timeout_s=600) == "success"
    tis = client.task_instances("pools_demo", run_id)
    steps = {ti.task_id for ti in tis if ti.map_index >= 0 and ti.state == "success"}
    assert steps == {"ingest", "quality_pre", "transcode"}
    peak = peak_pool_slots(tis)
    assert peak["io"] <= 2 and peak["cpu"] <= 2, peak
    # The limits were under pressure, not idle: four batches queued for two io slots filled them, and
    # transcodes (two cpu slots each) never ran two at once.
    assert peak["io"] == 2
    transcode_peak = peak_pool_slots(ti for ti in tis if ti.task_id == "transcode")
    assert transcode_peak["cpu"] == 2  # one transcode at a time
    # The broken vendor is an import error of its own file; the good vendor's DAG is active and ran.
    errors = client.import_errors()
    assert set(errors) == {"vendor_config_check.py"}
    assert "broken_demo.yaml" in errors["vendor_config_check.py"]
    assert "steps.transcode.pool_slots" in errors["vendor_config_check.py"]
    with client.metadata_engine().connect() as conn:
        stale = conn.execute(text("SELECT is_stale FROM dag WHERE dag_id = 'pools_demo'")).scalar_one()
    assert not stale
