"""DAG integrity over the whole DAG folder: every vendor file parses, with the settings its config asks for.

Airflow is imported inside the tests only: it reads its configuration at first import, which the session
fixture ``airflow_home`` sets.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dag_helpers import REPO, REPO_DAGS, AirflowHome

from pipeline.config import load_vendor
from pipeline.enums import StepName

pytestmark = pytest.mark.airflow

VENDOR_FILES = sorted((REPO_DAGS / "vendors").glob("*.yaml"))
STEPS = [step.value for step in StepName]
HEAVY = {"av", "ray", "ortools", "duckdb", "numpy", "pyarrow", "great_expectations", "torch", "psycopg2"}
#: Parsing all vendor files takes ≈ 0.25 s here; Airflow's own import timeout is 30 s.
PARSE_BUDGET_S = 2.0


def _bag(vendors_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from airflow.dag_processing.dagbag import BundleDagBag

    monkeypatch.setenv("SLUICE_VENDORS_DIR", str(vendors_dir))
    monkeypatch.setenv("SLUICE_PROJECT_DIR", str(REPO))
    folder = str(REPO_DAGS)
    return BundleDagBag(dag_folder=folder, bundle_path=folder, bundle_name="dags-folder")


@pytest.fixture(scope="module")
def repo_bag(airflow_home: AirflowHome) -> Iterator[Any]:
    """The repository's DAG folder with its own vendor files."""
    with pytest.MonkeyPatch.context() as mp:
        yield _bag(REPO_DAGS / "vendors", mp)


def test_every_vendor_file_becomes_a_dag_and_nothing_fails_to_import(repo_bag: Any) -> None:
    assert VENDOR_FILES, "the repository ships example vendor files"
    assert repo_bag.import_errors == {}
    assert set(repo_bag.dag_ids) == {path.stem for path in VENDOR_FILES}


def _assert_first_run_is_the_next_cron_time(dag: Any) -> None:
    """Unpausing the DAG just after a cron time (7 minutes, as the demo once did at 02:07 for a 02:00
    vendor) schedules the next cron time, not the one past: judged by the scheduler's own timetable,
    deserialized from what the DAG processor stores."""
    from unittest import mock

    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import TimeRestriction

    timetable = DagSerialization.from_dict(DagSerialization.to_dict(dag)).timetable
    past = timetable._align_to_prev(timetable._align_to_prev(datetime.now(UTC)) - timedelta(seconds=1))
    for after in (timedelta(minutes=7), timedelta(seconds=1)):
        with mock.patch("airflow.timetables.trigger.utcnow", return_value=past + after):
            info = timetable.next_dagrun_info(
                last_automated_data_interval=None,
                restriction=TimeRestriction(earliest=None, latest=None, catchup=dag.catchup),
            )
        assert info.run_after == timetable._get_next(past), (dag.dag_id, after, info.run_after)


@pytest.mark.parametrize("vendor_file", VENDOR_FILES, ids=lambda p: p.stem)
def test_dag_settings_come_from_the_vendor_config(repo_bag: Any, vendor_file: Path) -> None:
    vendor = load_vendor(vendor_file, base_dir=REPO)
    dag = repo_bag.dags[vendor.name]
    assert dag.catchup is False
    assert dag.max_active_runs == 1
    assert {"sluice", vendor.kind.value, *vendor.tags} <= set(dag.tags)
    assert dag.owner == vendor.owner
    assert dag.default_args["retries"] >= 1
    assert dag.doc_md and vendor.name in dag.doc_md and str(vendor_file.name) in dag.doc_md
    assert vendor.description in dag.doc_md
    if vendor.schedule.cron is None:
        assert dag.schedule is None
    else:
        assert dag.timetable.expression == vendor.schedule.cron and dag.start_date is None
        _assert_first_run_is_the_next_cron_time(dag)
    for step, config in vendor.steps.items():
        task = dag.get_task(step.value)
        assert (task.pool, task.pool_slots, task.retries) == (config.pool, config.pool_slots, config.retries)
        assert task.queue == (config.queue or config.pool)
        assert task.execution_timeout == timedelta(seconds=config.timeout_s)
        param = dag.params.get_param(step.value)
        assert param.value is config.enabled
        assert param.schema["type"] == "boolean"
        assert "critical" in param.description
    assert set(dag.params.keys()) == set(STEPS)


def test_task_topology(repo_bag: Any) -> None:
    """validate_conf → discover → plan → per batch (mapped) the six steps in order → dedup → warehouse_sync
    → finalize."""
    chain = ["validate_conf", "discover", "plan", *STEPS, "dedup", "warehouse_sync", "finalize"]
    for dag in repo_bag.dags.values():
        assert set(dag.task_ids) == set(chain)
        for upstream, downstream in itertools.pairwise(chain):
            assert downstream in dag.get_task(upstream).downstream_task_ids, (
                dag.dag_id,
                upstream,
                downstream,
            )
        assert dag.get_task("finalize").downstream_task_ids == set()
        assert [t.task_id for t in dag.leaves] == ["finalize"]
        mapped = {t.task_id for t in dag.tasks if t.get_closest_mapped_task_group() is not None}
        assert mapped == set(STEPS)
        assert {t.task_group.group_id for t in dag.tasks if t.task_id in STEPS} == {"batch"}
        for task_id in ("dedup", "warehouse_sync", "finalize"):
            assert dag.get_task(task_id).trigger_rule == "all_done"


def test_trigger_rules_follow_criticality(airflow_home: AirflowHome) -> None:
    """After a critical step a failure stops the batch; after a non-critical one the batch goes on."""
    from sluice_factory import build_vendor_dag

    vendor_file = REPO_DAGS / "vendors" / "acme_robotics.yaml"
    vendor = load_vendor(vendor_file, base_dir=REPO)
    steps = vendor.steps.model_copy(
        update={"quality_post": vendor.steps["quality_post"].model_copy(update={"critical": False})}
    )
    dag = build_vendor_dag(vendor.model_copy(update={"steps": steps}), vendor_file=vendor_file)
    rules = {step: dag.get_task(step).trigger_rule for step in STEPS}
    assert rules == {
        "ingest": "all_success",
        "quality_pre": "none_failed",
        "transcode": "none_failed",
        "quality_post": "none_failed",
        "annotate": "all_done",  # quality_post is non-critical here
        "shard": "all_done",  # annotate is non-critical
    }


def test_parsing_stays_cheap_and_touches_no_database(repo_bag: Any, airflow_home: AirflowHome) -> None:
    for stat in repo_bag.dagbag_stats:
        assert stat.duration.total_seconds() < PARSE_BUDGET_S, stat
    # In a fresh interpreter: what parsing the DAG folder imports. A catalog URL is set, so a connection
    # made at parse time would import its driver.
    code = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import BundleDagBag\n"
        "before = set(sys.modules)\n"
        f"bag = BundleDagBag(dag_folder={str(REPO_DAGS)!r}, bundle_path={str(REPO_DAGS)!r}, "
        "bundle_name='dags-folder')\n"
        "print(json.dumps({'dags': sorted(bag.dag_ids), 'errors': list(bag.import_errors),\n"
        "    'new': sorted({m.split('.')[0] for m in set(sys.modules) - before})}))\n"
    )
    env_overrides = {
        "SLUICE_VENDORS_DIR": str(REPO_DAGS / "vendors"),
        "SLUICE_PROJECT_DIR": str(REPO),
        "SLUICE_DATABASE_URL": "postgresql+psycopg2://nobody@127.0.0.1:9/none",
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env_overrides},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["errors"] == [] and report["dags"] == sorted(p.stem for p in VENDOR_FILES)
    assert HEAVY.isdisjoint(report["new"]), sorted(HEAVY & set(report["new"]))


def test_a_broken_vendor_file_is_an_import_error_of_its_own(
    airflow_home: AirflowHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    shutil.copy(REPO_DAGS / "vendors" / "acme_robotics.yaml", vendors)
    broken = (REPO_DAGS / "vendors" / "northwind_video.yaml").read_text()
    broken = broken.replace("    pool_slots: 2\n", "    pool: gpu_farm\n", 1)
    assert "gpu_farm" in broken
    (vendors / "northwind_video.yaml").write_text(broken)
    bag = _bag(vendors, monkeypatch)
    # The other vendor's DAG loads, and comes from a file without import errors (Airflow marks every DAG
    # of a file with an import error as stale).
    assert set(bag.dag_ids) == {"acme_robotics"}
    assert set(bag.import_errors) == {"vendor_config_check.py"}
    message = bag.import_errors["vendor_config_check.py"]
    assert "northwind_video.yaml" in message and "steps.transcode.pool" in message and "gpu_farm" in message
    assert bag.dags["acme_robotics"].relative_fileloc == "vendor_dags.py"


def _compose_worker_queues() -> set[str]:
    import yaml

    compose = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())
    queues: set[str] = set()
    for service in compose["services"].values():
        command = service.get("command") or []
        if command[:3] == ["airflow", "celery", "worker"]:
            queues |= set(command[command.index("--queues") + 1].split(","))
    return queues


def _inventory_worker_queues(inventory: Path) -> set[str]:
    import yaml

    queues: set[str] = set()
    for group_vars in (inventory / "group_vars").glob("*.yml"):
        queues |= set((yaml.safe_load(group_vars.read_text()) or {}).get("airflow_worker_queues", []))
    return queues or set(
        yaml.safe_load((REPO / "ansible/roles/airflow/defaults/main.yml").read_text())[
            "airflow_worker_queues"
        ]
    )


def test_every_task_queue_is_served_by_the_deployments_workers(repo_bag: Any) -> None:
    """A task sent to a Celery queue no worker serves waits forever: every queue the example DAGs use is
    served by a worker of the compose stack and of every Ansible inventory (and GPU steps go to GPU hosts)."""
    from pipeline.config.operations import SERVED_QUEUES

    used = {task.queue for dag in repo_bag.dags.values() for task in dag.tasks}
    assert {"cpu", "io", "db"} <= used  # the steps' and run tasks' own queues, not only Airflow's default
    # What vendor configs may name (SERVED_QUEUES) is what the deployment really serves.
    assert used <= set(SERVED_QUEUES) == _compose_worker_queues()
    for inventory in sorted((REPO / "ansible" / "inventories").iterdir()):
        assert _inventory_worker_queues(inventory) == set(SERVED_QUEUES), inventory.name


def test_a_step_on_the_gpu_pool_is_sent_to_the_gpu_queue(tmp_path: Path, airflow_home: AirflowHome) -> None:
    text = (REPO_DAGS / "vendors" / "acme_robotics.yaml").read_text()
    text = text.replace(
        "  annotate:\n    enabled: false",
        "  annotate:\n    pool: gpu\n    resources: {cpus: 1, memory_bytes: 8 GiB, gpus: 1}\n    enabled: false",
        1,
    )
    (tmp_path / "acme_robotics.yaml").write_text(text)
    with pytest.MonkeyPatch.context() as mp:
        dag = _bag(tmp_path, mp).dags["acme_robotics"]
    assert (dag.get_task("annotate").pool, dag.get_task("annotate").queue) == ("gpu", "gpu")
    assert dag.get_task("transcode").queue == "cpu"
