"""``sluice services`` on a real Ray head and worker node: with the worker node killed, ``status`` says which
part runs and ``up`` starts only the worker node; ``up`` of what runs says so and starts nothing.

Opt-in (``make test-cluster``): a head and a worker node take minutes to come up on a loaded 2-core machine
(docs/cluster.md). ``tests/cli/test_cli_services.py`` checks the partly-running report cheaply, with a
stand-in head.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import opt_in

from pipeline.services.registry import RAY_WORKER, ray_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.ray,
    opt_in("starts a Ray head and worker node (minutes on 2 cores)"),
]

SLUICE = Path(sys.executable).with_name("sluice")


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sluice-svc-ray-", dir="/tmp"))
    try:
        yield path
    finally:
        ray_cluster(path).down()
        shutil.rmtree(path, ignore_errors=True)


def _sluice(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")} | {"SLUICE_HOME": str(home)}
    return subprocess.run(
        [str(SLUICE), "services", *args], env=env, capture_output=True, text=True, timeout=3600, check=False
    )


def test_a_killed_worker_node_is_reported_and_started_alone(home: Path) -> None:
    up = _sluice(home, "up", "ray")
    assert up.returncode == 0, up
    cluster = ray_cluster(home)
    assert up.stdout.strip() == f"ray: started at {cluster.address}", up.stdout
    head_pid = cluster.head().live_pid()
    assert head_pid is not None and cluster.kill_worker(RAY_WORKER.name) is not None
    deadline = time.monotonic() + 30
    while cluster.worker(RAY_WORKER.name).live_pid() is not None:
        assert time.monotonic() < deadline, "the killed worker node still runs"
        time.sleep(0.2)

    said = _sluice(home, "status", "ray")
    assert said.returncode == 0, said
    assert said.stdout.splitlines()[0] == (
        f"ray: partly running at {cluster.address}: ray-head running, {RAY_WORKER.name} stopped "
        "(`sluice services up ray` starts what is stopped)"
    ), said.stdout
    assert json.loads(_sluice(home, "status", "--json", "ray").stdout)["ray"]["state"] == "partly running"

    again = _sluice(home, "up", "ray")
    assert again.returncode == 0, again
    assert again.stdout.strip() == (
        f"ray: started {RAY_WORKER.name} (ray-head already running) at {cluster.address}"
    ), again.stdout
    assert cluster.head().live_pid() == head_pid  # the head was kept
    assert set(cluster.alive_nodes().values()) == {"ray-head", RAY_WORKER.name}

    kept = _sluice(home, "up", "ray")
    assert kept.returncode == 0 and kept.stdout.strip() == f"ray: already running at {cluster.address}", kept
    assert json.loads(_sluice(home, "status", "--json", "ray").stdout)["ray"]["state"] == "running"

    down = _sluice(home, "down", "ray")
    assert down.returncode == 0 and down.stdout.strip() == "ray: stopped", down
