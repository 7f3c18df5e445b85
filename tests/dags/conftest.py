"""DAG-test fixtures: one Airflow metadata DB per session, a synthetic vendor per test, ``dag.test()`` runs.

Airflow reads its configuration once, at first import, so every test here that touches Airflow depends on
the session fixture :func:`airflow_home`, which sets ``AIRFLOW_*`` for the session (undone at its end) and
migrates one SQLite metadata DB before anything imports ``airflow``. Test modules import ``airflow`` only
inside fixtures and tests for the same reason.

The DAG folder Airflow sees holds one generated file rendering the vendors of ``SLUICE_VENDORS_DIR`` with the
repository's factory and :mod:`dag_test_steps` (the registered steps with failure injection).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

# The scheduled runs of the message families read their outputs with the family tests' own readers.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "families"))
from dag_helpers import REPO_DAGS, AirflowHome, SyntheticVendor, vendor_config
from scheduler_harness import DAG_FILE as SCHEDULER_DAG_FILE
from scheduler_harness import HARNESS_APPLICATION, SchedulerHarness
from sqlalchemy.engine import make_url

AIRFLOW_BIN = Path(sys.executable).with_name("airflow")
TEST_DAG_FILE = '''"""Airflow DAGs of the test suite: the vendors of SLUICE_VENDORS_DIR, run with dag_test_steps."""

from sluice_factory import vendor_dags

globals().update(vendor_dags(step_resolver="dag_test_steps:step_class", executor="local"))
'''


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowHome]:
    """Airflow configured for the session: a migrated SQLite metadata DB and a DAG folder of test DAGs."""
    if "airflow" in sys.modules:
        pytest.fail("airflow was imported before its test configuration was set")
    home = tmp_path_factory.mktemp("airflow_home")
    dags_folder = home / "dags"
    dags_folder.mkdir()
    (dags_folder / "test_vendor_dags.py").write_text(TEST_DAG_FILE)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.syspath_prepend(str(REPO_DAGS))
        subprocess.run([str(AIRFLOW_BIN), "db", "migrate"], check=True, capture_output=True, timeout=300)
        yield AirflowHome(home, dags_folder)


@pytest.fixture(scope="session")
def robot_drop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three clean two-second robot episodes (one second has a gap-rate edge effect) and their calibration sidecar (made once)."""
    from pipeline.synth import RobotDropConfig, make_robot_drop

    out = tmp_path_factory.mktemp("robot_drop") / "drop"
    make_robot_drop(out, RobotDropConfig(episodes=3, seconds=2.0))
    return out


@pytest.fixture
def synthetic_vendor(
    airflow_home: AirflowHome,
    robot_drop: Path,
    migrated_database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> SyntheticVendor:
    """A fresh vendor ``synth_robot`` with every step on, its own drop copy, catalog and store."""
    drop = tmp_path / "drop"
    shutil.copytree(robot_drop, drop)
    vendors_dir = tmp_path / "vendors"
    vendors_dir.mkdir()
    name = "synth_robot"
    (vendors_dir / f"{name}.yaml").write_text(yaml.safe_dump(vendor_config(name, drop), sort_keys=False))
    store = tmp_path / "store"
    for key, value in {
        "SLUICE_HOME": tmp_path / "home",
        "SLUICE_DATABASE_URL": migrated_database_url,
        "SLUICE_STORE_URL": store,
        "SLUICE_VENDORS_DIR": vendors_dir,
        "SLUICE_PROJECT_DIR": tmp_path,
    }.items():
        monkeypatch.setenv(key, str(value))
    monkeypatch.delenv("SLUICE_RAY_ADDRESS", raising=False)
    return SyntheticVendor(name, vendors_dir, drop, store, migrated_database_url, airflow_home)


@pytest.fixture(scope="session")
def scheduler(
    tmp_path_factory: pytest.TempPathFactory, pg_server: Any, role_passwords: tuple[str, str]
) -> Iterator[SchedulerHarness]:
    """The session's real Airflow: services on a metadata DB of the suite's Postgres (see scheduler_harness).

    Its tasks get the catalog as a deployment gives it to them: the superuser's URL (which they must not
    use for the steps) and the ingest role's. The harness reads the catalog as the superuser, its
    connections labelled ``HARNESS_APPLICATION`` so that a test can tell them from the tasks'.
    Stopped at the end with ``sluice airflow down``, which must find and stop all four services.
    """
    from pipeline.airflow_local import LocalAirflow
    from pipeline.catalog import migrate
    from pipeline.config import DEFAULT_POOLS
    from pipeline.pgserver import free_port

    root = tmp_path_factory.mktemp("scheduler")
    dags, vendors, store, home = root / "dags", root / "vendors", root / "store", root / "home"
    for folder in (dags, vendors, store, home):
        folder.mkdir()
    (dags / "test_vendor_dags.py").write_text(SCHEDULER_DAG_FILE)
    from pipeline.catalog.roles import ensure_roles

    catalog_url = pg_server.create_database("dags_scheduler")
    migrate.upgrade(catalog_url)
    sluice_env = {
        "SLUICE_HOME": str(home),
        "SLUICE_DATABASE_URL": catalog_url,
        "SLUICE_INGEST_DATABASE_URL": ensure_roles(catalog_url, *role_passwords).writer_url,
        "SLUICE_STORE_URL": str(store),
        "SLUICE_VENDORS_DIR": str(vendors),
        "SLUICE_PROJECT_DIR": str(root),
    }
    airflow = LocalAirflow(
        home / "airflow",
        sluice_env=sluice_env,
        dags_folder=dags,
        extra_python_path=[REPO_DAGS, Path(__file__).resolve().parent],
        metadata_url=pg_server.create_database("dags_scheduler_airflow"),
        parallelism=8,
        port=free_port(),  # never a developer's own Airflow on 8080
    )
    from pipeline.airflow_local import PoolSpec

    pools = {name: PoolSpec(p["slots"], p["description"]) for name, p in DEFAULT_POOLS.items()}
    # Several tests' runs at once: more cpu slots than cores keep them from queueing behind each other.
    pools["cpu"] = PoolSpec(4, pools["cpu"].description)
    airflow.up(pools=pools)
    try:
        harness_url = make_url(catalog_url).update_query_dict({"application_name": HARNESS_APPLICATION})
        yield SchedulerHarness(
            airflow, root, vendors, store, harness_url.render_as_string(hide_password=False)
        )
    finally:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SLUICE_"))}
        done = subprocess.run(
            [str(AIRFLOW_BIN.with_name("sluice")), "airflow", "down"],
            env={**env, **sluice_env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        still = airflow.status().running or any(s.running for s in airflow.status().services)
        airflow.down()
        assert done.stdout.split() == [
            "stopped:",
            "triggerer,",
            "dag-processor,",
            "scheduler,",
            "api-server",
        ], done.stdout + done.stderr
        assert not still
