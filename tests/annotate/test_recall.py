"""Recall end to end, through the CLI as users run it: build demo@v1 and shard it, add a blockiness check,
`sluice recall` scores only the unscored episodes and names the version, manifests and shards holding the
blocky one, and `sluice dataset build --exclude-recalled` cuts demo@v2 without it, saying why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from planted import textured, write_gray
from sluice_world import REPO_ROOT, World, batch_items, land, vendor_from_example
from sqlalchemy import select
from typer.testing import CliRunner

from pipeline.annotate.recall import open_recalls
from pipeline.catalog import make_session_factory, session_scope
from pipeline.catalog.models import DatasetVersion
from pipeline.cli import dataset, recall, shard
from pipeline.steps.annotate import AnnotateStep
from pipeline.steps.base import WorkItem
from pipeline.steps.runner import run_step
from pipeline.steps.transcode import TranscodeStep
from pipeline.ui.pages import ViewSources, overview
from pipeline.ui.render import render

pytestmark = pytest.mark.integration

SPEC = "name: demo\nfilter: {where: is_accepted}\n"
BLOCKINESS_CHECK: dict[str, Any] = {
    "annotators": {"motion_energy": {"version": "1"}, "blockiness": {"version": "1"}},
    "stages": [
        {"name": "coding", "annotators": ["blockiness"], "require": [{"key": "blockiness.ratio", "max": 1.5}]}
    ],
}


def _cli(app: Any, args: list[str], env: dict[str, str]) -> Any:
    import typer

    if not isinstance(app, typer.Typer):
        wrapped = typer.Typer()
        wrapped.command()(app)
        app = wrapped
    result = CliRunner().invoke(app, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_recall_scores_the_unscored_names_what_holds_them_and_v2_leaves_them_out(
    world: World, tmp_path: Path
) -> None:
    drop = tmp_path / "drop"
    drop.mkdir()
    moving = [textured(240, 320, 4 * t) for t in range(30)]
    write_gray(drop / "clean.mp4", moving, crf=20)
    write_gray(drop / "other.mp4", [textured(240, 320, 3 * t, seed=9) for t in range(30)], crf=20)
    write_gray(drop / "blocky.mp4", moving, crf=51)
    # demo@v1 was made before anyone checked blockiness: only motion was scored.
    before = vendor_from_example(
        "northwind_video", drop, annotate={"annotators": {"motion_energy": {"version": "1"}}}
    )
    episodes = {Path(p).stem: e for p, e in land(world, before, drop, "*.mp4").items()}
    assert len(episodes) == 3
    items = batch_items(drop, "*.mp4")
    by_id = [WorkItem(key=str(e), episode_id=e) for e in episodes.values()]
    transcoded = run_step(TranscodeStep(before, world.ctx), by_id)
    assert transcoded.succeeded == 3, transcoded
    run_step(AnnotateStep(before, world.ctx), items)

    env = {
        "SLUICE_HOME": str(world.settings.home),
        "SLUICE_DATABASE_URL": world.settings.database_url,
        "SLUICE_PROJECT_DIR": str(world.settings.project_dir),
    }
    spec = tmp_path / "demo.yaml"
    spec.write_text(SPEC)
    v1 = _cli(dataset.app, ["build", str(spec), "--json"], env)
    assert v1["version"] == "v1"
    shards = _cli(shard.command, ["demo@v1", "--json"], env)["shards"]
    assert shards and all(s["ok"] for s in shards)

    # The check lands: blockiness, held to at most 1.5 by the vendor's cascade.
    data = yaml.safe_load((REPO_ROOT / "dags" / "vendors" / "northwind_video.yaml").read_text())
    data["source"] = {**data["source"], "url": str(drop), "settle_s": 0}
    data["source"].pop("ready_marker", None)
    data["annotate"] = BLOCKINESS_CHECK
    vendor_file = tmp_path / "vendors" / "northwind_video.yaml"
    vendor_file.parent.mkdir()
    vendor_file.write_text(yaml.safe_dump(data))

    (report,) = _cli(recall.command, ["--check", "blockiness", "--vendor", str(vendor_file), "--json"], env)
    assert (report["accepted"], report["scored"], report["already_scored"]) == (3, 3, 0)
    assert list(report["rejected"]) == [str(episodes["blocky"])]
    assert "blockiness.ratio" in report["rejected"][str(episodes["blocky"])][0]
    (held,) = report["datasets"]
    assert held["dataset"] == "demo@v1" and (held["rejected_episodes"], held["episodes"]) == (1, 3)
    assert len(held["manifests"]) == 2  # Arrow IPC and Parquet
    assert {s["uri"] for s in report["shards"]} <= {s["uri"] for s in shards} and report["shards"]
    assert sum(s["rejected_episodes"] for s in report["shards"]) == 1

    # Targeted and resumable: a second recall scores nothing and finds the same.
    (again,) = _cli(recall.command, ["--check", "blockiness", "--vendor", str(vendor_file), "--json"], env)
    assert (again["scored"], again["already_scored"], again["rejected"]) == (0, 3, report["rejected"])

    # The view lists the recall as open while the latest demo version holds the blocky episode.
    sources = ViewSources(engine=world.ctx.engine)
    page = render("overview", overview(sources))
    assert '<tr data-check="blockiness@1">' in page and "demo@v1</b> (1)" in page

    v2 = _cli(dataset.app, ["build", str(spec), "--exclude-recalled", "--json"], env)
    assert v2["version"] == "v2" and v2["counts"]["excluded"] == 1
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        recorded = session.execute(
            select(DatasetVersion.spec).where(DatasetVersion.name == "demo", DatasetVersion.version == "v2")
        ).scalar_one()
    (left,) = recorded["excluded"]
    assert left["episode_id"] == episodes["blocky"] and left["reasons"][0].startswith(
        "blockiness@1: blockiness.ratio"
    )
    assert sum(v2["split_episodes"].values()) == 2
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        assert open_recalls(session) == []  # demo@v2 no longer holds it
    assert "No open recall." in render("overview", overview(sources))
