"""``sluice scrub`` over every kind of stored object, and the training-side readers refusing damaged ones.

The world is made by the real steps: a robot drop and a video drop ingested, gated, transcoded (an episode
file; clips), post-gated, annotated and sharded, then a dataset version built (both manifest files). A
sweep then flips single bits, one at a time, in objects of every kind: scrub must find each flip in the
object it is in and in no other.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.catalog import make_session_factory, session_scope
from pipeline.catalog.queries import stored_objects
from pipeline.config import VendorConfig, load_vendor
from pipeline.datasets import build, load_spec
from pipeline.enums import StepName
from pipeline.orchestrate.batch import episode_items
from pipeline.settings import load_settings
from pipeline.steps.base import StepContext, WorkItem
from pipeline.steps.registry import step_class
from pipeline.steps.runner import build_context, run_step
from pipeline.store import StoredObject
from pipeline.synth import RobotDropConfig, VideoDropConfig, make_robot_drop, make_video_drop
from pipeline.warehouse import sync

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
KINDS = {"raw", "transcoded_episode", "clip", "annotation", "shard", "manifest", "manifest_parquet"}
#: Single-bit flips of the sweep (the issue asks for at least 50), spread round-robin over the kinds.
FLIPS = 56


@dataclass
class World:
    ctx: StepContext
    env: dict[str, str]
    manifest_uri: str


def _vendor(example: str, drop: Path, folder: Path) -> VendorConfig:
    import yaml

    data = yaml.safe_load((REPO / "dags" / "vendors" / f"{example}.yaml").read_text())
    data["source"] = {**data["source"], "url": str(drop), "settle_s": 0}
    data["source"].pop("ready_marker", None)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_vendor(path)


def _run_every_step(ctx: StepContext, vendor: VendorConfig, drop: Path) -> None:
    paths = sorted(str(p.relative_to(drop)) for p in drop.rglob("*") if p.is_file() and p.suffix != ".json")
    files = [WorkItem(key=p, source_path=p, size_bytes=(drop / p).stat().st_size) for p in paths]
    for name in StepName:
        items = files if name is StepName.INGEST else episode_items(ctx, vendor, paths)
        summary = run_step(step_class(name)(vendor, ctx), items)
        assert summary.rejected == 0, (vendor.name, name, _rejections(ctx))


def _rejections(ctx: StepContext) -> list[tuple[str, str, str]]:
    from sqlalchemy import text

    with ctx.engine.connect() as conn:
        rows = conn.execute(text("SELECT step, reason, detail FROM step_runs WHERE status = 'rejected'"))
        return [tuple(r) for r in rows]  # type: ignore[misc]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, pg_server) -> World:  # type: ignore[no-untyped-def]
    from pipeline.catalog import migrate

    base = tmp_path_factory.mktemp("scrub-world")
    url = pg_server.create_database("scrub_world")
    migrate.upgrade(url)
    env = {
        "SLUICE_HOME": str(base / "home"),
        "SLUICE_DATABASE_URL": url,
        "SLUICE_STORE_URL": str(base / "store"),
        "SLUICE_PROJECT_DIR": str(base),
    }
    settings = load_settings(
        home=base / "home", database_url=url, store_url=str(base / "store"), project_dir=base
    )
    ctx = build_context(settings, code_version="test")
    robot, video = base / "robot", base / "video"
    make_robot_drop(robot, RobotDropConfig(episodes=2, seconds=2.0, width=64, height=48))
    make_video_drop(video, VideoDropConfig(clips=1, seconds=3, width=320, height=240, scene_cuts=0))
    _run_every_step(ctx, _vendor("acme_robotics", robot, base / "vendors"), robot)
    _run_every_step(ctx, _vendor("northwind_video", video, base / "vendors"), video)
    sync(ctx.engine, settings.warehouse_path)
    version = build(
        load_spec(REPO / "dags" / "datasets" / "demo_accepted.yaml"),
        engine=ctx.engine,
        warehouse_path=settings.warehouse_path,
        store=ctx.store,
    )
    return World(ctx, env, version.manifest_uri)


def _objects(world: World) -> list[StoredObject]:
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        return stored_objects(session, world.ctx.store)


def _local(world: World, obj: StoredObject) -> Path:
    _, path = world.ctx.store._fs_of(obj.uri)
    return Path(path)


def _flip(path: Path, bit: int) -> None:
    mode = path.stat().st_mode
    path.chmod(0o644)  # raw objects are read-only on disk
    with open(path, "r+b") as f:
        f.seek(bit // 8)
        byte = f.read(1)[0]
        f.seek(bit // 8)
        f.write(bytes([byte ^ (1 << (bit % 8))]))
    path.chmod(mode)


def _scrub_cli(world: World, *args: str) -> tuple[int, dict]:
    code = "from pipeline.cli import app; app()"
    done = subprocess.run(
        [sys.executable, "-c", code, "scrub", "--json", *args],
        cwd=REPO,
        env={**os.environ, **world.env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


def test_scrub_covers_every_kind_of_stored_object(world: World) -> None:
    code, report = _scrub_cli(world)
    assert code == 0 and report["findings"] == []
    assert set(report["by_kind"]) == KINDS, report["by_kind"]


def test_scrub_finds_every_single_bit_flip_in_every_kind(world: World) -> None:
    objects = _objects(world)
    by_kind: dict[str, list[StoredObject]] = {}
    for obj in objects:
        by_kind.setdefault(obj.kind, []).append(obj)
    assert set(by_kind) == KINDS
    rng = random.Random(21)
    kinds = sorted(by_kind)
    found = Counter()
    for n in range(FLIPS):
        kind = kinds[n % len(kinds)]
        victim = rng.choice(by_kind[kind])
        path = _local(world, victim)
        bit = rng.randrange(path.stat().st_size * 8)
        _flip(path, bit)
        try:
            findings = list(world.ctx.store.scrub(objects))
        finally:
            _flip(path, bit)
        assert [(f.uri, f.kind, f.problem) for f in findings] == [(victim.uri, kind, "hash")], (kind, bit)
        found[kind] += 1
    assert sum(found.values()) == FLIPS and set(found) == KINDS
    assert list(world.ctx.store.scrub(objects)) == []  # every flip undone


def test_the_cli_names_each_damaged_object_and_fails(world: World) -> None:
    objects = _objects(world)
    victims = {}
    for obj in objects:
        victims.setdefault(obj.kind, obj)
    for obj in victims.values():
        _flip(_local(world, obj), 8 * (obj.size_bytes // 2))
    try:
        code, report = _scrub_cli(world)
    finally:
        for obj in victims.values():
            _flip(_local(world, obj), 8 * (obj.size_bytes // 2))
    assert code == 1
    assert {(f["kind"], f["uri"]) for f in report["findings"]} == {(k, o.uri) for k, o in victims.items()}
    code, only_raw = _scrub_cli(world, "--kind", "raw")
    assert code == 0 and set(only_raw["by_kind"]) == {"raw"}


def test_training_readers_refuse_a_damaged_manifest_or_episode(world: World, tmp_path: Path) -> None:
    from pipeline.manifest import open_manifest
    from pipeline.manifest.errors import ManifestIntegrityError
    from pipeline.reader import SampleLoader, SampleReadError
    from pipeline.reader.verify import EpisodeIntegrityError

    manifest = next(o for o in _objects(world) if o.uri == world.manifest_uri)
    path = _local(world, manifest)
    _flip(path, 8 * (manifest.size_bytes // 3))
    try:
        with pytest.raises(ManifestIntegrityError, match=str(path)):
            open_manifest(world.manifest_uri, rank=0, world_size=1, cache_dir=tmp_path / "a", split=None)
    finally:
        _flip(path, 8 * (manifest.size_bytes // 3))
    rows = open_manifest(world.manifest_uri, rank=0, world_size=1, cache_dir=tmp_path / "b", split=None)
    episode = next(o for o in _objects(world) if o.kind == "transcoded_episode")
    episode_path = _local(world, episode)
    _flip(episode_path, 8 * (episode.size_bytes // 2))
    try:
        with (
            SampleLoader(rows, 2, workers=1, prefetch=0, skip_unsupported=True) as loader,
            pytest.raises(SampleReadError, match=str(episode_path)) as caught,
        ):
            for _ in zip(range(20), loader, strict=False):
                pass
        assert isinstance(caught.value.__cause__, EpisodeIntegrityError)
    finally:
        _flip(episode_path, 8 * (episode.size_bytes // 2))
