"""``sluice services``: start the S3 server and Redis, find them from another command, stop them."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.airflow_local import COMPONENTS
from pipeline.cli import app
from pipeline.errors import UnknownChoiceError
from pipeline.pgserver import LocalPostgres

pytestmark = pytest.mark.integration


def _run(args: list[str], home: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, args, env={"SLUICE_HOME": str(home)})
    return result.exit_code, result.output


def test_services_up_status_down(tmp_path: Path) -> None:
    home = tmp_path / "home"
    code, out = _run(["services", "up", "s3", "redis"], home)
    try:
        assert code == 0, out
        code, out = _run(["services", "status", "--json"], home)
        info = json.loads(out)
        assert info["s3"]["running"] and info["redis"]["running"] and not info["ray"]["running"]
        with urllib.request.urlopen(info["s3"]["where"] + "/", timeout=5) as response:
            assert b"ListAllMyBucketsResult" in response.read()  # an S3 endpoint answers there
        assert info["redis"]["where"].startswith("redis://127.0.0.1:")
        # Postgres and the Airflow components are listed too (this home has started neither).
        assert info["postgres"] == {
            "running": False,
            "where": None,
            "processes": {"postmaster": {"pid": None, "log": str(home / "pg" / "server.log")}},
        }
        assert list(info["airflow"]["processes"]) == list(COMPONENTS) and not info["airflow"]["running"]
        pids = [p["pid"] for name in ("s3", "redis") for p in info[name]["processes"].values()]
        assert all(isinstance(pid, int) for pid in pids)
    finally:
        code, out = _run(["services", "down"], home)
    assert code == 0 and "s3: stopped" in out and "redis: stopped" in out and "ray: was not running" in out
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)
    code, out = _run(["services", "status"], home)
    assert "s3: stopped" in out and "redis: stopped" in out
    # An unknown name is a product error (the entry point prints it as one line and exits 2).
    refused = CliRunner().invoke(app, ["services", "up", "kafka"], env={"SLUICE_HOME": str(home)})
    assert isinstance(refused.exception, UnknownChoiceError)
    assert "kafka" in str(refused.exception) and "redis" in str(refused.exception)


def test_status_finds_a_running_postgres_and_airflow_components(
    tmp_path: Path, pg_server: LocalPostgres
) -> None:
    """Postgres by the postmaster pg_ctl records; an Airflow component by its Daemon pid file."""

    from pipeline.airflow_local import LocalAirflow
    from pipeline.services.registry import status

    home = pg_server.root.parent  # the session cluster is <base>/pg, where a home keeps its own
    airflow = LocalAirflow(home / "airflow", sluice_env={})
    sleeper = airflow.daemon("scheduler")
    sleeper.argv = ["sleep", "60"]  # stands in for `airflow scheduler`: only its pid file matters here
    pid = sleeper.launch()
    try:
        info = status(home)
    finally:
        airflow.down()
    assert info["postgres"]["running"] and info["postgres"]["where"] == f"127.0.0.1:{pg_server.status().port}"
    assert info["postgres"]["processes"]["postmaster"]["pid"] == pg_server.status().pid
    assert info["airflow"]["processes"]["scheduler"]["pid"] == pid
    assert not info["airflow"]["running"] and info["airflow"]["where"] is None  # the others do not run
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
