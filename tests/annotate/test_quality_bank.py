"""The quality bank end to end on a video drop with planted defects: scores, the cascade's stops and skips,
the quality rank in the catalog and the warehouse, and a dataset filter on it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont
from planted import textured, weave, write_gray
from sluice_world import World, batch_items, land, vendor_from_example
from sqlalchemy import select

from pipeline.catalog import make_session_factory, session_scope
from pipeline.catalog.models import Annotation
from pipeline.catalog.runs import start_pipeline_run
from pipeline.datasets import DatasetSpec
from pipeline.report.cascade import stage_costs
from pipeline.report.html import render_report
from pipeline.steps.annotate import AnnotateStep
from pipeline.steps.runner import run_step
from pipeline.ui.pages import ViewSources
from pipeline.warehouse import sync

pytestmark = pytest.mark.integration

H, W, N = 240, 320, 30  # the smallest clip northwind_video's contract accepts: 320x240, a second


def _captioned(image: np.ndarray) -> np.ndarray:
    canvas = Image.fromarray(image)
    ImageDraw.Draw(canvas).text((16, 100), "SALE 50% OFF", fill=250, font=ImageFont.load_default(size=28))
    return np.asarray(canvas)


def _face() -> np.ndarray:
    from matplotlib import cbook

    photo = Image.open(cbook.get_sample_data("grace_hopper.jpg")).convert("L")
    return np.asarray(photo.resize((W, round(photo.height * W / photo.width))))[:H]


def planted_drop(drop: Path) -> dict[str, Path]:
    """One clean clip and one per defect; the file stem names the defect."""
    drop.mkdir(parents=True)
    moving = [textured(H, W, 4 * t) for t in range(N)]
    clips = {
        "clean": (moving, 20),
        "blocky": (moving, 51),
        "interlaced": ([weave(textured(H, W, 8 * t), textured(H, W, 8 * t + 4)) for t in range(N)], 20),
        "text": ([_captioned(f) for f in moving], 20),
        "face": ([np.roll(_face(), t, axis=1) for t in range(N)], 20),
        "static": ([moving[0]] * N, 20),
        "cut": (moving[:15] + [255 - f for f in moving[15:]], 20),
    }
    return {name: write_gray(drop / f"{name}.mp4", frames, crf=crf) for name, (frames, crf) in clips.items()}


ANNOTATE: dict[str, Any] = {
    "annotators": {
        name: {"version": "1"}
        for name in (
            "motion_energy",
            "image_stats",
            "scene_stats",
            "blockiness",
            "interlace",
            "text",
            "faces",
        )
    },
    "stages": [
        {
            "name": "coding",
            "annotators": ["motion_energy", "blockiness", "interlace"],
            "require": [
                {"key": "motion_energy.still_fraction", "max": 0.9},
                {"key": "blockiness.ratio", "max": 1.5},
                {"key": "interlace.interlaced_fraction", "max": 0.5},
            ],
        },
        {"name": "content", "annotators": ["text", "faces"]},
    ],
    "rank": {
        "version": "1",
        "tiers": [
            {
                "name": "gold",
                "require": [
                    {"key": "text.frame_fraction", "max": 0},
                    {"key": "faces.frame_fraction", "max": 0},
                    {"key": "scene_stats.cut_count", "max": 0},
                ],
            },
            {
                "name": "silver",
                "require": [
                    {"key": "text.frame_fraction", "max": 0},
                    {"key": "faces.frame_fraction", "max": 0},
                ],
            },
        ],
    },
}


def test_planted_defects_get_their_scores_ranks_and_cascade_stops(world: World, tmp_path: Path) -> None:
    drop = tmp_path / "drop"
    planted_drop(drop)
    vendor = vendor_from_example("northwind_video", drop, annotate=ANNOTATE)
    episodes = land(world, vendor, drop, "*.mp4")
    assert len(episodes) == 7, episodes
    step = AnnotateStep(vendor, world.ctx)
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        run_id = start_pipeline_run(
            session, vendor_id=step.vendor_id, dag_id="sluice_northwind_video", run_id="planted",
            config_hash="planted", step_toggles={"annotate": True},
        )  # fmt: skip
    summary = run_step(step, batch_items(drop, "*.mp4"), pipeline_run_id=run_id)
    assert (summary.succeeded, summary.failed) == (7, 0)

    with session_scope(make_session_factory(world.ctx.engine)) as session:
        rows = session.execute(select(Annotation)).scalars().all()
        by_name = {Path(path).stem: episode_id for path, episode_id in episodes.items()}
        values = {
            name: {r.key: r.value for r in rows if r.episode_id == eid} for name, eid in by_name.items()
        }

    ranks = {name: v["quality_rank"] for name, v in values.items()}
    assert ranks == {
        "clean": "gold",
        "cut": "silver",
        "text": "reject",
        "face": "reject",
        "blocky": "reject",
        "interlaced": "reject",
        "static": "reject",
    }
    stopped = {name: v["annotate.stopped_at"] for name, v in values.items()}
    assert {n for n, s in stopped.items() if s == "coding"} == {"blocky", "interlaced", "static"}
    # A stopped clip skipped the content stage: recorded as skipped, never scored.
    assert values["blocky"]["annotate.skipped"] == [
        {"annotator": "text", "version": "1", "stage": "content"},
        {"annotator": "faces", "version": "1", "stage": "content"},
    ]
    assert "text.frame_fraction" not in values["blocky"]
    assert "stopped at stage coding" in values["blocky"]["quality_rank.reasons"]
    assert any("blockiness.ratio" in r for r in values["blocky"]["quality_rank.reasons"])
    assert any("interlace" in r for r in values["interlaced"]["quality_rank.reasons"])
    assert any("still_fraction" in r for r in values["static"]["quality_rank.reasons"])
    assert values["text"]["text.frame_fraction"] == 1.0 and values["clean"]["text.frame_fraction"] == 0.0
    assert values["face"]["faces.frame_fraction"] > 0.5 and values["clean"]["faces.frame_fraction"] == 0.0
    assert values["cut"]["scene_stats.cut_count"] == 1
    # What each stage cost is recorded per episode; the content stage ran only where coding passed.
    stages = {name: {s["stage"]: s for s in v["annotate.stages"]} for name, v in values.items()}
    assert set(stages["blocky"]) == {"unstaged", "coding"} and set(stages["clean"]) == {
        "unstaged",
        "coding",
        "content",
    }
    assert stages["clean"]["content"]["cpu_s"] > 0 and stages["clean"]["content"]["ran"] == ["text", "faces"]

    # `sluice report` of the run: per stage, episodes reached and removed and the CPU seconds spent.
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        costs = {c.stage: c for c in stage_costs(session, list(by_name.values()))}
    assert [(c.reached, c.removed) for c in costs.values()] == [(7, 0), (7, 3), (4, 0)]
    assert costs["content"].annotators == ["faces", "text"]
    spent = sum(s["content"]["cpu_s"] for s in stages.values() if "content" in s)
    assert costs["content"].cpu_s == pytest.approx(spent, abs=1e-3)
    html = render_report(ViewSources(engine=world.ctx.engine), str(run_id))
    row = re.search(r'<tr data-stage="coding">(.*?)</tr>', html)
    assert row is not None and ">7<" in row.group(1) and ">3<" in row.group(1)

    warehouse = tmp_path / "warehouse.duckdb"
    sync(world.ctx.engine, warehouse)
    spec = DatasetSpec.model_validate(
        {
            "name": "gold_clips",
            "filter": {
                "where": "is_accepted AND quality_rank IN $ranks",
                "params": {"ranks": ["gold", "silver"]},
            },
        }
    )
    with duckdb.connect(str(warehouse), read_only=True) as con:
        picked = con.execute(
            f"SELECT episode_id FROM episode_view WHERE {spec.filter.where} ORDER BY episode_id",
            spec.filter.bound_params(),
        ).fetchall()
        stops = dict(con.execute("SELECT episode_id, cascade_stopped_at FROM episode_view").fetchall())
    assert [r[0] for r in picked] == sorted([by_name["clean"], by_name["cut"]])
    assert stops[by_name["static"]] == "coding" and stops[by_name["clean"]] is None
