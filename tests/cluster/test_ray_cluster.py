"""A Ray cluster of a head and a worker node, each a ``ray start`` process group the project's code starts.

The head declares one CPU, the worker node two: the transcode asks for two CPUs per worker, so its items
may only land on the worker node (asserted on the node ids each item reports). Then the worker node is
killed (kill -9 of its process group) while a transcode runs, and a replacement node joins: the items the
dead node held are moved to a worker on the new node, and every episode ends transcoded once.
"""

from __future__ import annotations

import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from cluster_helpers import opt_in

from pipeline.config import load_vendor
from pipeline.enums import StepName
from pipeline.orchestrate import discover, plan, run_batch_step, start_run, validate_conf
from pipeline.services.raynodes import NodeSpec, RayCluster
from pipeline.settings import load_settings
from pipeline.steps.runner import build_context
from pipeline.synth import RobotDropConfig, make_robot_drop

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.ray,
    # Opt-in: on a loaded 2-core machine a `ray start` node aborts during start-up (its raylet waits a
    # fixed 15 s for the dashboard agent it spawns, which took 27-36 s to start at load 5-10 here), and
    # each attempt costs a minute or more; see docs/cluster.md.
    opt_in("starts a Ray head and worker node (minutes on 2 cores)"),
]

REPO = Path(__file__).resolve().parents[2]
WORKER = NodeSpec("worker1", cpus=2, memory_bytes=6 * 1024**3)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    import ray

    root = Path(tempfile.mkdtemp(prefix="sluice-ray-", dir="/tmp"))  # short: Ray's socket paths live here
    ray_cluster = RayCluster(root, head_cpus=1, workers=(WORKER,))
    try:
        ray_cluster.up()
        yield ray_cluster
    finally:
        ray.shutdown()
        ray_cluster.down()


def _vendor(tmp_path: Path, drop: Path) -> object:
    data = yaml.safe_load((REPO / "dags" / "vendors" / "acme_robotics.yaml").read_text())
    data["source"] |= {"url": str(drop), "settle_s": 0}
    data["planner"] |= {"batch_stagger_s": 0, "min_splits": 1, "max_splits": 1}
    path = tmp_path / "vendors" / "acme_robotics.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_vendor(path)


def test_transcode_lands_on_the_worker_node_and_survives_losing_it(
    cluster: RayCluster, tmp_path: Path, migrated_database_url: str
) -> None:
    manifest = make_robot_drop(
        tmp_path / "drop", RobotDropConfig(episodes=4, seconds=2.0, width=64, height=48)
    )
    vendor = _vendor(tmp_path, tmp_path / "drop")
    settings = load_settings(
        home=tmp_path / "home",
        database_url=migrated_database_url,
        store_url=str(tmp_path / "store"),
        ray_address=cluster.address,
        project_dir=tmp_path,
    )
    nodes = cluster.alive_nodes()
    head = next(node for node, name in nodes.items() if name == "ray-head")
    ctx = build_context(settings)
    try:
        run_id = start_run(
            ctx, vendor, dag_id="acme_robotics", run_id="manual__ray", toggles=validate_conf(vendor, {})
        )  # type: ignore[arg-type]
        discover(ctx, vendor, run_id)  # type: ignore[arg-type]
        (batch,) = plan(ctx, vendor, run_id)["batch_ids"]  # type: ignore[arg-type]
        for step in (StepName.INGEST, StepName.QUALITY_PRE):
            assert run_batch_step(settings, vendor, step, run_id, batch, ctx=ctx)["failed"] == 0  # type: ignore[arg-type]

        # The transcode on Ray, its worker node killed as soon as the first episode starts there.
        done: dict[str, object] = {}
        runner = threading.Thread(
            target=lambda: done.update(
                run_batch_step(settings, vendor, StepName.TRANSCODE, run_id, batch, ctx=ctx)
            )  # type: ignore[arg-type]
        )
        runner.start()
        deadline = time.monotonic() + 300
        while not _transcode_runs(ctx.engine) and time.monotonic() < deadline:
            time.sleep(0.2)
        killed_at = time.monotonic()
        assert cluster.kill_worker(WORKER.name, signal.SIGKILL) is not None
        cluster.start_worker(WORKER.name)  # the replacement node
        runner.join(timeout=600)
        recovered_s = time.monotonic() - killed_at
    finally:
        ctx.engine.dispose()

    assert done, "the transcode did not finish"
    assert done["failed"] == 0 and done["succeeded"] == len(manifest.files), done
    placed: dict[str, int] = done["ray_nodes"]  # type: ignore[assignment]
    assert head not in placed, f"a transcode landed on the head node: {placed}"
    # Every episode ran to success on some worker node; those the killed node held ran again elsewhere.
    assert sum(placed.values()) == len(manifest.files)
    with ctx.engine.connect() as conn:
        final = conn.execute(
            sa.text("SELECT status, count(*) FROM step_runs WHERE step = 'transcode' GROUP BY status")
        ).all()
    assert dict(final) == {"succeeded": len(manifest.files)}
    print(f"transcode recovered from the lost node in {recovered_s:.1f} s; items per node {placed}")


def _transcode_runs(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(sa.text("SELECT count(*) FROM step_runs WHERE step = 'transcode'")).scalar())
