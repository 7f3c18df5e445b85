"""``sluice services``: start the S3 server and Redis, find them from another command, stop them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from clirun import Sluice, clean_error

from pipeline.airflow_local import COMPONENTS
from pipeline.pgserver import LocalPostgres
from pipeline.services.daemon import free_port, port_answers

pytestmark = pytest.mark.integration


def test_services_up_status_down(tmp_path: Path, sluice: Sluice) -> None:
    home = tmp_path / "home"
    env = {"SLUICE_HOME": str(home)}
    # Asking about services nothing started records nothing: no port chosen, no folder made.
    said = sluice(["services", "status"], env)
    assert said.returncode == 0 and "s3: stopped" in said.stdout and "ray: stopped" in said.stdout, said
    said = sluice(["services", "down"], env)
    assert said.returncode == 0 and "s3: was not running" in said.stdout, said
    assert not (home / "services").exists(), sorted(home.rglob("*"))
    said = sluice(["services", "up", "s3", "redis"], env)
    try:
        assert said.returncode == 0, said
        assert "s3: started at http://127.0.0.1:" in said.stdout, said.stdout
        assert "redis: started at redis://127.0.0.1:" in said.stdout, said.stdout
        info = json.loads(sluice(["services", "status", "--json"], env).stdout)
        assert info["s3"]["running"] and info["redis"]["running"] and not info["ray"]["running"]
        assert info["s3"]["state"] == "running" and info["ray"]["state"] == "stopped"
        with urllib.request.urlopen(info["s3"]["where"] + "/", timeout=5) as response:
            assert b"ListAllMyBucketsResult" in response.read()  # an S3 endpoint answers there
        assert info["redis"]["where"].startswith("redis://127.0.0.1:")
        # Postgres and the Airflow components are listed too (this home has started neither).
        assert info["postgres"] == {
            "state": "stopped",
            "running": False,
            "where": None,
            "processes": {"postmaster": {"pid": None, "log": str(home / "pg" / "server.log")}},
        }
        assert list(info["airflow"]["processes"]) == list(COMPONENTS) and not info["airflow"]["running"]
        pids = [p["pid"] for name in ("s3", "redis") for p in info[name]["processes"].values()]
        assert all(isinstance(pid, int) for pid in pids)
        # Up again: nothing is started, and it says so.
        again = sluice(["services", "up", "s3"], env)
        assert again.returncode == 0, again
        assert again.stdout.strip() == f"s3: already running at {info['s3']['where']}", again.stdout
        # status takes the names up and down take (README: `sluice services up / status / down [s3 ...]`).
        only = sluice(["services", "status", "s3"], env)
        assert only.returncode == 0, only
        assert only.stdout.splitlines()[0] == f"s3: running at {info['s3']['where']}", only.stdout
        assert "redis" not in only.stdout and "postgres" not in only.stdout, only.stdout
        two = json.loads(sluice(["services", "status", "--json", "redis", "postgres"], env).stdout)
        assert list(two) == ["postgres", "redis"] and two["redis"] == info["redis"]
    finally:
        said = sluice(["services", "down"], env)
    assert said.returncode == 0, said
    assert "s3: stopped" in said.stdout and "redis: stopped" in said.stdout, said.stdout
    assert "ray: was not running" in said.stdout, said.stdout
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)
    said = sluice(["services", "status"], env)
    assert "s3: stopped" in said.stdout and "redis: stopped" in said.stdout, said.stdout
    assert not (home / "services" / "ray").exists()  # status and down of Ray recorded no port either
    # An unknown name is a product error: one line naming it and the allowed names, exit 2.
    clean_error(sluice(["services", "up", "kafka"], env), "unknown service 'kafka'", "redis")
    clean_error(sluice(["services", "status", "kafka"], env), "unknown service 'kafka'", "postgres")


def test_up_moves_off_a_kept_port_another_program_holds(tmp_path: Path, sluice: Sluice) -> None:
    """The S3 server's kept port now belongs to another program (a plain ``http.server``, which answers 200
    to anything): ``up`` starts moto on another port, says so, and only moto's answer counts as ready."""
    home = tmp_path / "home"
    env = {"SLUICE_HOME": str(home)}
    port = free_port()
    (home / "services" / "s3").mkdir(parents=True)
    (home / "services" / "s3" / "s3.port").write_text(str(port))  # what an earlier `up` kept
    stranger = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_answers("127.0.0.1", port):
            assert stranger.poll() is None and time.monotonic() < deadline, "http.server did not start"
            time.sleep(0.1)
        said = sluice(["services", "up", "s3"], env)
        try:
            assert said.returncode == 0, said
            assert f"s3: port {port} was taken by another program" in said.stdout, said.stdout
            info = json.loads(sluice(["services", "status", "--json", "s3"], env).stdout)
            where = info["s3"]["where"]
            assert info["s3"]["state"] == "running" and where != f"http://127.0.0.1:{port}", info
            assert f"s3: started at {where}" in said.stdout, said.stdout
            with urllib.request.urlopen(where + "/", timeout=5) as response:
                assert b"ListAllMyBucketsResult" in response.read()  # moto, not the stranger
            pid = info["s3"]["processes"]["s3"]["pid"]
            assert f"-p {where.rsplit(':', 1)[1]}" in " ".join(psutil.Process(pid).cmdline())
            assert stranger.poll() is None  # the other program was left alone
        finally:
            down = sluice(["services", "down", "s3"], env)
        assert down.returncode == 0 and "s3: stopped" in down.stdout, down
    finally:
        stranger.terminate()
        stranger.wait(timeout=10)


def test_status_says_which_part_of_ray_runs(tmp_path: Path, sluice: Sluice) -> None:
    """The head runs, the worker node does not: ``status`` says partly running, naming each, not stopped.

    The head is a stand-in (``sleep``), found by its pid file as ``status`` finds any node; a real head and
    worker node with the worker killed is ``tests/cluster/test_services_ray.py`` (opt-in: minutes)."""
    from pipeline.services.registry import ray_cluster

    home = tmp_path / "home"
    env = {"SLUICE_HOME": str(home)}
    cluster = ray_cluster(home)
    (home / "services" / "ray").mkdir(parents=True)
    (home / "services" / "ray" / "ray-head.port").write_text(str(free_port()))
    head = cluster.head()
    head.argv = ["sleep", "60"]  # stands in for `ray start --head --block`
    head.launch()
    try:
        said = sluice(["services", "status", "ray"], env)
        info = json.loads(sluice(["services", "status", "--json", "ray"], env).stdout)
    finally:
        cluster.down()
    assert said.returncode == 0, said
    assert said.stdout.splitlines()[0] == (
        f"ray: partly running at {cluster.address}: ray-head running, worker1 stopped "
        "(`sluice services up ray` starts what is stopped)"
    ), said.stdout
    assert info["ray"]["state"] == "partly running" and not info["ray"]["running"], info
    assert info["ray"]["processes"]["worker1"]["pid"] is None
    assert isinstance(info["ray"]["processes"]["ray-head"]["pid"], int)


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
