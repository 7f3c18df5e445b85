"""``sluice demo --cluster`` ends where ``sluice demo`` ends: same states, reasons and transcoded bytes.

Both demos run in subprocesses, as ``make demo-cluster`` and ``make demo`` run them, each on a copy of the
project's vendor and dataset files, with a home and a catalog database of its own and the same seed (the
synthetic drops are deterministic: their manifests are compared too). The cluster demo starts, through the
project's code, moto's S3 server holding the store, Redis, Airflow on the CeleryExecutor with a worker per
queue, and a Ray head and worker node; it must stop all of them. Then the two catalogs are compared: every
file's state, reasons and duplicate, and the sha256 of every transcoded output per source file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import opt_in
from typer.testing import CliRunner

from pipeline.cli import app

pytestmark = [
    pytest.mark.integration,
    pytest.mark.airflow,
    pytest.mark.ray,
    pytest.mark.slow,
    # Opt-in: two demos, one of them starting a Ray head and worker node and a Celery worker per queue;
    # tens of minutes on 2 cores (docs/cluster.md has the figure).
    opt_in("runs the cluster demo beside the single-machine demo (~25 min on 2 cores)"),
]

REPO = Path(__file__).resolve().parents[2]
SLUICE = Path(sys.executable).with_name("sluice")
VENDORS = ("acme_robotics", "kestrel_ros2", "northwind_video")
#: The demo's seed is its defaults; these make it shorter (as tests/cli/test_demo.py runs it).
DEMO_ARGS = ("--episodes", "2", "--seconds", "2")


def _demo(
    root: Path, database_url: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """Run ``sluice demo`` on a project copy under ``root``; its output and the ``SLUICE_*`` it ran with."""
    project = root / "project"
    for folder in ("vendors", "datasets"):
        shutil.copytree(REPO / "dags" / folder, project / "dags" / folder)
    sluice_env = {
        "SLUICE_HOME": str(root / "home"),
        "SLUICE_PROJECT_DIR": str(project),
        "SLUICE_VENDORS_DIR": str(project / "dags" / "vendors"),
        "SLUICE_DATABASE_URL": database_url,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SLUICE_", "AWS_"))}
    done = subprocess.run(
        [str(SLUICE), "demo", *DEMO_ARGS, *extra],
        env=env | sluice_env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    return done, sluice_env


def _end_state(sluice_env: dict[str, str]) -> dict[str, Any]:
    """Every file's (state, reasons, duplicate) and every transcoded output's sha256, per source file."""
    from sqlalchemy import create_engine

    from pipeline.cli.demo import transcoded_outputs

    listed = CliRunner().invoke(app, ["files", "list", "--json"], env=sluice_env, catch_exceptions=False)
    files = {
        (r["vendor"], r["path"]): (r["state"], sorted(r["reasons"]), r["duplicate_of"])
        for r in json.loads(listed.output)
    }
    engine = create_engine(sluice_env["SLUICE_DATABASE_URL"])
    try:
        outputs = transcoded_outputs(engine)
    finally:
        engine.dispose()
    project = Path(sluice_env["SLUICE_PROJECT_DIR"])
    drops = {
        v: json.loads((project / ".sluice" / "drops" / v / "drop.json").read_text())["files"] for v in VENDORS
    }
    return {
        "files": files,
        "sha256": {key: sorted(sha for _, sha in made) for key, made in outputs.items()},
        "uris": [uri for made in outputs.values() for uri, _ in made],
        "drops": {v: sorted((f["path"], f["sha256"]) for f in fs) for v, fs in drops.items()},
    }


@pytest.mark.timeout(5400)
def test_the_cluster_demo_ends_as_the_single_machine_demo(fresh_database_url: Any) -> None:
    from pipeline.airflow_local import LocalAirflow
    from pipeline.services.registry import status as services_status

    # Short: Ray's socket paths live under $SLUICE_HOME/services/ray (at most 107 bytes).
    cluster_root = Path(tempfile.mkdtemp(prefix="sluice-dc-", dir="/tmp"))
    local_root = Path(tempfile.mkdtemp(prefix="sluice-dl-", dir="/tmp"))
    t0 = time.monotonic()
    try:
        on_cluster, cluster_env = _demo(cluster_root, fresh_database_url(), "--cluster")
    finally:
        # What the demo started, it stopped (stopped here all the same when it did not).
        home = cluster_root / "home"
        left = [name for name, part in services_status(home).items() if part["where"]]
        airflow = LocalAirflow(home / "airflow", sluice_env={})
        left += [s.component for s in airflow.status().services if s.running]
        airflow.down()
        subprocess.run(
            [str(SLUICE), "services", "down"], env=os.environ | {"SLUICE_HOME": str(home)}, check=False
        )
    cluster_s = time.monotonic() - t0
    assert on_cluster.returncode == 0, on_cluster.stdout[-6000:] + on_cluster.stderr[-4000:]
    assert left == [], left

    t1 = time.monotonic()
    single, single_env = _demo(local_root, fresh_database_url())
    single_s = time.monotonic() - t1
    assert single.returncode == 0, single.stdout[-6000:] + single.stderr[-4000:]

    cluster_state, single_state = _end_state(cluster_env), _end_state(single_env)
    assert cluster_state["drops"] == single_state["drops"]  # the same seed made the same inputs
    assert cluster_state["files"] == single_state["files"]
    assert cluster_state["sha256"] and cluster_state["sha256"] == single_state["sha256"]
    assert all(uri.startswith("s3://sluice-store/derived/") for uri in cluster_state["uris"])
    assert not any(uri.startswith("s3://") for uri in single_state["uris"])

    # It said where each part ran: Celery queues, the worker node (never the head) for the transcode, S3.
    out = on_cluster.stdout
    assert "Celery  transcode: " in out and "queue cpu" in out, out[-4000:]
    transcode_on_ray = [line for line in out.splitlines() if "Ray     transcode:" in line]
    assert len(transcode_on_ray) == len(VENDORS), out[-4000:]
    assert all("worker1" in line and "ray-head" not in line for line in transcode_on_ray), transcode_on_ray
    assert "S3      " in out and "→ s3://sluice-store/derived/" in out
    heading = ""
    for line in out.splitlines():  # each run's S3 outputs under that run's heading
        if line.startswith("where the "):
            heading = line.split()[2]
        elif line.startswith("    S3      "):
            assert line.split()[1].startswith(f"{heading}/"), (heading, line)
    assert "the S3 server stops with the demo" in out
    print(
        f"cluster demo {cluster_s:.0f} s, single-machine demo {single_s:.0f} s; "
        f"{len(cluster_state['files'])} files and {sum(map(len, cluster_state['sha256'].values()))} "
        "transcoded outputs equal"
    )
