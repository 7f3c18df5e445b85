"""Shards against the real catalog and a local store: whole or absent, verified, recorded, balanced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import webdataset as wds
from sluice_world import World, land, make_world, vendor_from_example
from sqlalchemy import func, select

from pipeline.annotate.inputs import episode_inputs
from pipeline.catalog import make_session_factory, session_scope
from pipeline.catalog.models import Shard
from pipeline.catalog.outputs import artifact_inputs, create_dataset_version
from pipeline.shard import (
    ShardInfo,
    assign_ranks,
    list_shards,
    parse_sample_key,
    verify_shards,
    write_shards,
)
from pipeline.shard.errors import ShardPlanConflictError
from pipeline.shard.verify import ShardIndex, index_path
from pipeline.synth import RobotDropConfig, make_robot_drop

pytestmark = pytest.mark.integration

CONFIG = "a" * 64


@pytest.fixture
def world(tmp_path: Path, migrated_database_url: str) -> World:
    w = make_world(tmp_path / "home", migrated_database_url)
    yield w  # type: ignore[misc]
    w.close()


def _episodes(world: World, tmp_path: Path, n: int = 3) -> dict[int, object]:
    drop = tmp_path / "drop"
    make_robot_drop(drop, RobotDropConfig(episodes=n, seconds=2, width=64, height=48))
    ids = land(world, vendor_from_example("acme_robotics", drop), drop, "*.mcap")
    return dict(episode_inputs(world.ctx.engine, sorted(ids.values())))


def _version(world: World, name: str) -> int:
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        return create_dataset_version(session, name=name, version="v1", spec_hash="s" * 64, spec={})


def _write(
    world: World,
    rows: list[dict[str, object]],
    target_shard_bytes: int,
    dataset: str,
    version_id: int,
    config_hash: str = CONFIG,
) -> list[ShardInfo]:
    """``write_shards`` of ``rows`` into version v1 of ``dataset`` (the id ``_version`` returned)."""
    return write_shards(
        rows,
        target_shard_bytes,
        world.ctx.store,
        dataset,
        "v1",
        engine=world.ctx.engine,
        config_hash=config_hash,
        code_version="test",
        dataset_version_id=version_id,
    )


def test_shards_are_verified_recorded_and_balanced(world: World, tmp_path: Path) -> None:
    refs = _episodes(world, tmp_path, 3)
    rows = []
    for i, ref in enumerate(refs.values()):
        split = "train" if i < 2 else "val"
        # two time windows of the same episode artifact become one sample
        for start in (0, 1_000_000_000):
            rows.append(
                {
                    "episode_id": str(ref.episode_id),
                    "uri": ref.uri,
                    "source_sha256": ref.source_sha256,
                    "split": split,
                    "start_ns": start,
                    "end_ns": start + 10**9,
                }
            )
    version_id = _version(world, "pick")
    shards = _write(world, rows, 1, "pick", version_id)
    assert [(s.split, s.index, s.n_samples) for s in shards] == [
        ("train", 0, 1),
        ("train", 1, 1),
        ("val", 0, 1),
    ]
    assert all(s.written for s in shards)

    records = list_shards(world.ctx.engine, version_id)
    assert [r.uri for r in records] == [s.uri for s in shards]
    assert all(v.ok for v in verify_shards(world.ctx.store, records)), verify_shards(world.ctx.store, records)
    # read back the way training does: with the webdataset package
    samples = [
        (sample["__key__"], sample)
        for r in records
        for sample in wds.WebDataset(r.uri.removeprefix("file://"), shardshuffle=False, empty_check=False)
    ]
    assert len(samples) == 3
    for key, members in samples:
        episode_id, sha = parse_sample_key(key)
        ref = refs[episode_id]
        assert sha == ref.source_sha256
        meta = json.loads(members["json"])
        assert [r["start_ns"] for r in meta["rows"]] == [0, 1_000_000_000]
        assert members["mcap"] == Path(ref.uri.removeprefix("file://")).read_bytes()
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        _, blobs = artifact_inputs(session, records[0].artifact_id)
        assert blobs == [refs[parse_sample_key(samples[0][0])[0]].blob_id]

    # a re-run keeps the intact, recorded shards
    again = _write(world, rows, 1, "pick", version_id)
    assert [s.sha256 for s in again] == [s.sha256 for s in shards] and not any(s.written for s in again)
    # cut otherwise (another target), the version would hold the old shards beside the new ones, each
    # sample twice for a training run that reads them all: refused, and nothing is written or recorded
    with pytest.raises(
        ShardPlanConflictError,
        match=r"pick@v1 is sharded already, otherwise: 3 shard\(s\) are recorded and this plan cuts 2",
    ):
        _write(world, rows, 10**9, "pick", version_id)
    assert [r.uri for r in list_shards(world.ctx.engine, version_id)] == [s.uri for s in shards]
    assert sorted(p.name for p in Path(shards[0].uri.removeprefix("file://")).parent.glob("*.tar")) == [
        "shard-000000.tar",
        "shard-000001.tar",
    ]

    # ranks: near-equal bytes with the planner
    sizes = [(f"s{i}", size) for i, size in enumerate([100, 90, 80, 70, 60, 50, 40, 30, 20, 10])]
    assignment = assign_ranks(sizes, 3)
    assert sorted(u for r in assignment.ranks for u in r) == sorted(u for u, _ in sizes)
    assert max(assignment.bytes_per_rank) == 190  # the optimum: loads are multiples of 10 and 550 / 3 > 180
    assert assignment.idle_ranks == []
    sparse = assign_ranks(sizes[:2], 4)  # more ranks than shards: two ranks have nothing to read
    assert len(sparse.idle_ranks) == 2 and all(not sparse.ranks[r] for r in sparse.idle_ranks)


def test_a_shard_cut_at_a_member_boundary_is_reported(world: World, tmp_path: Path) -> None:
    refs = _episodes(world, tmp_path, 2)
    rows = [
        {"episode_id": r.episode_id, "uri": r.uri, "source_sha256": r.source_sha256, "split": "train"}
        for r in refs.values()
    ]
    version_id = _version(world, "cut")
    (shard,) = _write(world, rows, 1 << 30, "cut", version_id)
    path = world.ctx.store.path(shard.key)
    index = ShardIndex.from_json(Path(index_path(path)).read_bytes())
    last_kept = index.members[1]  # the first sample's two members
    cut_at = last_kept.offset_data + -(-last_kept.size_bytes // 512) * 512
    with open(path, "r+b") as fh:
        fh.truncate(cut_at)
    import tarfile

    with tarfile.open(path) as tar:  # a tar reader accepts the shorter archive silently
        assert len(tar.getmembers()) == 2
    (verification,) = verify_shards(world.ctx.store, list_shards(world.ctx.engine, version_id))
    assert not verification.ok
    text = " ".join(verification.problems)
    assert "tar holds 2 members, the index 4" in text and "size" in text and "end-of-archive" in text


def test_kill_9_leaves_no_shard_without_its_record(world: World, tmp_path: Path) -> None:
    refs = list(_episodes(world, tmp_path, 2).values())
    big = tmp_path / "payloads"
    big.mkdir()
    rows = []
    for k in range(8):  # 2 episodes x 3 splits x 8 payloads of 4 MiB: 48 shards
        for split in ("train", "val", "eval"):
            for ref in refs:
                payload = big / f"{ref.episode_id}-{split}-{k}.mcap"
                payload.write_bytes(os.urandom(4 << 20))
                rows.append(
                    {
                        "episode_id": ref.episode_id,
                        "uri": str(payload),
                        "source_sha256": ref.source_sha256,
                        "split": split,
                    }
                )
    rows_file = tmp_path / "rows.json"
    rows_file.write_text(json.dumps(rows))
    version_id = _version(world, "killed")
    url = world.ctx.engine.url.render_as_string(hide_password=False)
    args = [
        sys.executable,
        str(Path(__file__).with_name("shard_child.py")),
        url,
        world.ctx.store.root,
        str(rows_file),
        str(version_id),
    ]

    def recorded() -> int:
        with session_scope(make_session_factory(world.ctx.engine)) as session:
            return session.execute(select(func.count()).select_from(Shard)).scalar_one()

    child = subprocess.Popen(args)
    deadline = time.monotonic() + 120
    while recorded() < 3 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    done = recorded()
    assert 3 <= done < 48, "the child must be killed mid-way"

    # every recorded shard is whole; files without a record are invisible to readers
    records = list_shards(world.ctx.engine, version_id)
    assert len(records) == done
    assert all(v.ok for v in verify_shards(world.ctx.store, records))
    on_disk = {p for p in (Path(world.ctx.store.root) / "shards" / "killed").rglob("*.tar")}
    assert {Path(r.uri.removeprefix("file://")) for r in records} <= on_disk
    assert len(on_disk) <= done + 1  # at most the one renamed before the kill came

    # a re-run finishes the job, keeping what was recorded
    again = _write(world, rows, 1, "killed", version_id, config_hash="c" * 64)
    assert len(again) == 48 and sum(not s.written for s in again) >= done
    records = list_shards(world.ctx.engine, version_id)
    assert len(records) == 48 and all(v.ok for v in verify_shards(world.ctx.store, records))


def test_shard_step_packs_each_accepted_episode(world: World, tmp_path: Path) -> None:
    from sluice_world import batch_items

    from pipeline.catalog.models import Artifact
    from pipeline.shard.catalog import ShardRecord
    from pipeline.steps.runner import run_step
    from pipeline.steps.shard import ShardStep

    drop = tmp_path / "drop"
    make_robot_drop(drop, RobotDropConfig(episodes=2, seconds=2, width=64, height=48))
    vendor = vendor_from_example("acme_robotics", drop)
    episodes = land(world, vendor, drop, "*.mcap")
    summary = run_step(ShardStep(vendor, world.ctx), batch_items(drop, "*.mcap"))
    assert (summary.succeeded, summary.failed) == (2, 0)
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        rows = session.execute(
            select(
                Shard.id,
                Shard.artifact_id,
                Artifact.uri,
                Artifact.sha256,
                Artifact.size_bytes,
                Shard.n_samples,
                Shard.n_episodes,
                Shard.split,
                Shard.shard_index,
                Artifact.episode_id,
            ).join(Artifact, Artifact.id == Shard.artifact_id)
        ).all()
    assert sorted(r.episode_id for r in rows) == sorted(episodes.values())
    records = [ShardRecord(*r[:9]) for r in rows]
    assert all("/shards/_episodes/" in r.uri for r in records)
    assert all(v.ok for v in verify_shards(world.ctx.store, records))
