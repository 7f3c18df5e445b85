"""The local Airflow's configuration and the figures read back from its metadata DB (no services started).

Starting the services is exercised by the real-scheduler test in tests/dags.
"""

from __future__ import annotations

import configparser
import json
import os
import stat
from pathlib import Path

import pytest
from orchestrate_helpers import write_vendor

from pipeline.airflow_local import (
    ADMIN_USER,
    LocalAirflow,
    pools_from_vendors,
    process_start_mark,
    settings_env,
)
from pipeline.bench.stagger import peak_completions
from pipeline.orchestrate.airflow_client import TaskInstanceTimes, peak_pool_slots
from pipeline.settings import load_settings


def _ti(pool: str, start: float, end: float, slots: int = 1) -> TaskInstanceTimes:
    return TaskInstanceTimes("d", "r", "t", -1, "success", pool, slots, start, end)


def test_the_largest_pool_size_wins_when_vendors_disagree(tmp_path: Path) -> None:
    small = write_vendor(tmp_path, tmp_path)
    big = small.model_copy(
        update={"pools": {**small.pools, "cpu": small.pools["cpu"].model_copy(update={"slots": 6})}}
    )
    pools = pools_from_vendors([small, big])
    assert pools["cpu"].slots == 6 and pools["io"].slots == small.pools["io"].slots
    assert set(pools) == {"cpu", "db", "gpu", "io"}


def test_peak_pool_slots_weighs_slots_and_treats_intervals_as_half_open() -> None:
    tis = [
        _ti("cpu", 0, 10, slots=2),
        _ti("cpu", 10, 20),
        _ti("cpu", 15, 25),
        _ti("io", 0, 5),
        _ti("io", 1, 2),
    ]
    assert peak_pool_slots(tis) == {"cpu": 2, "io": 2}
    assert peak_pool_slots([_ti("cpu", 0, 10), _ti("cpu", 5, 6, slots=3)]) == {"cpu": 4}


def test_peak_completions_counts_the_busiest_second_sliding() -> None:
    assert peak_completions([]) == 0
    assert peak_completions([0.0, 0.9, 1.5, 1.8, 3.0]) == 3  # 0.9, 1.5, 1.8 straddle a second boundary
    assert peak_completions([0.0, 1.0, 2.0, 3.0]) == 1  # a window is half-open


def test_configuration_is_private_complete_and_stable(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home", project_dir=tmp_path, vendors_dir=Path("vendors"))
    airflow = LocalAirflow.from_settings(settings, port=18080)
    airflow.configure()
    for path in (airflow.config_path, airflow.password_file, airflow.state_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(airflow.config_path)
    assert cfg["core"]["executor"] == "LocalExecutor"
    assert cfg["core"]["dags_folder"].endswith("/dags") and cfg["core"]["plugins_folder"].endswith("/plugins")
    assert cfg["core"]["auth_manager"].endswith("SimpleAuthManager")
    assert cfg["core"]["simple_auth_manager_users"] == f"{ADMIN_USER}:admin"
    assert cfg["core"]["execution_api_server_url"] == "http://127.0.0.1:18080/execution/"
    assert cfg["database"]["sql_alchemy_conn"] == f"sqlite:///{settings.home_abs / 'airflow' / 'airflow.db'}"
    # A vendor file added while Airflow runs becomes a DAG within seconds, not Airflow's default 30.
    assert int(cfg["dag_processor"]["min_file_process_interval"]) <= 10
    password = airflow.admin_password()
    secret = cfg["api_auth"]["jwt_secret"]
    assert len(password) >= 16 and len(secret) >= 32
    airflow.configure()  # a second `up` keeps the login and the tokens valid
    again = configparser.ConfigParser(interpolation=None)
    again.read(airflow.config_path)
    assert airflow.admin_password() == password and again["api_auth"]["jwt_secret"] == secret
    assert json.loads(airflow.state_path.read_text())["port"] == 18080


def test_services_get_this_airflow_and_these_settings_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", "/somewhere/else")
    monkeypatch.setenv("SLUICE_STORE_URL", "/another/store")
    settings = load_settings(home=tmp_path / "home", project_dir=tmp_path, database_url="postgresql://x/y")
    env = LocalAirflow.from_settings(settings).env()
    assert env["AIRFLOW_HOME"] == str(settings.home_abs / "airflow")
    assert "AIRFLOW__CORE__DAGS_FOLDER" not in env
    assert env["SLUICE_DATABASE_URL"] == "postgresql://x/y"
    assert env["SLUICE_VENDORS_DIR"] == str(tmp_path / "dags" / "vendors")
    assert env.get("SLUICE_STORE_URL") == settings_env(settings).get("SLUICE_STORE_URL")


def test_every_setting_off_its_default_reaches_the_services(tmp_path: Path) -> None:
    settings = load_settings(
        home=tmp_path / "home", project_dir=tmp_path, store_verify="full", staging_max_age_s=60
    )
    env = LocalAirflow.from_settings(settings).env()
    assert (env["SLUICE_STORE_VERIFY"], env["SLUICE_STAGING_MAX_AGE_S"]) == ("full", "60.0")
    assert "SLUICE_RAY_ADDRESS" not in env  # defaults stay unset


def test_a_clock_step_does_not_make_down_forget_the_services_up_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``down`` recognises its services by pid and start instant. psutil's create_time() adds the boot time,
    which the kernel derives from the wall clock: set the clock (simulated here by moving psutil's boot
    time an hour) and every service looked like a stranger's, so down printed "nothing was running"."""
    import subprocess

    import psutil

    airflow = LocalAirflow(tmp_path / "airflow", sluice_env={})
    airflow.configure()
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        (airflow.run_dir / "scheduler.pid").write_text(f"{sleeper.pid} {process_start_mark(sleeper.pid)}")
        assert airflow._live_pid("scheduler") == sleeper.pid
        real_boot = psutil.boot_time()
        monkeypatch.setattr(psutil, "boot_time", lambda: real_boot + 3600)
        monkeypatch.setattr(psutil._pslinux, "BOOT_TIME", real_boot + 3600, raising=False)
        assert airflow._live_pid("scheduler") == sleeper.pid
        assert airflow.down() == ["scheduler"]
        sleeper.wait(timeout=10)  # reaped by down already, or now
        assert not psutil.pid_exists(sleeper.pid)
    finally:
        sleeper.kill()
    # A recycled pid is never taken for the service: a mark of another process does not match.
    (airflow.run_dir / "scheduler.pid").write_text(f"{os.getpid()} ticks:1")
    assert airflow._live_pid("scheduler") is None


def test_the_metadata_url_in_use_is_remembered_and_another_one_refused_while_running(tmp_path: Path) -> None:
    airflow = LocalAirflow(tmp_path / "airflow", sluice_env={}, metadata_url="postgresql://u:secret@h/a")
    airflow.configure()
    # Tools that only talk to a running installation (status, down, the client) find its metadata DB.
    assert LocalAirflow(tmp_path / "airflow", sluice_env={}).metadata_url == "postgresql://u:secret@h/a"
