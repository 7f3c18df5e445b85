"""``sluice shard NAME@VERSION`` on a dataset of robot episodes and video clips, read back with ``webdataset``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import webdataset as wds
from sluice_world import make_world
from training_world import TrainingWorld, make_training_world
from typer.testing import CliRunner

from pipeline.cli import app

pytestmark = pytest.mark.integration


@pytest.fixture
def training(tmp_path: Path, migrated_database_url: str) -> TrainingWorld:
    world = make_world(tmp_path / "home", migrated_database_url)
    made = make_training_world(world, tmp_path)
    yield made  # type: ignore[misc]
    world.close()


def _env(training: TrainingWorld) -> dict[str, str]:
    settings = training.world.settings
    return {
        "SLUICE_HOME": str(settings.home_abs),
        "SLUICE_PROJECT_DIR": str(settings.project_dir_abs),
        "SLUICE_DATABASE_URL": str(settings.database_url),
    }


def _shard(training: TrainingWorld, *args: str) -> dict[str, object]:
    done = CliRunner().invoke(app, ["shard", *args, "--json"], env=_env(training), catch_exceptions=False)
    assert done.exit_code == 0, done.output
    result: dict[str, object] = json.loads(done.output)
    return result


def test_shard_cli_writes_one_sample_per_manifest_row(training: TrainingWorld) -> None:
    version = training.build(training.spec())
    store = training.world.ctx.store
    assert version.parquet_uri is not None
    rows = pq.read_table(version.parquet_uri).to_pylist()
    clip_rows = [r for r in rows if r["clip_index"] is not None]
    per_video = [sum(r["episode_id"] == e for r in clip_rows) for e in {r["episode_id"] for r in clip_rows}]
    assert len(per_video) == 2 and max(per_video) >= 2  # a video episode of several clips

    # small shards, so that each split has several and the ranks get whole shards of one split
    result = _shard(training, version.ref, "--target-shard-bytes", "200 KiB", "--world-size", "2")
    shards = result["shards"]
    assert isinstance(shards, list) and all(s["ok"] for s in shards)
    assert {s["split"] for s in shards} == {r["split"] for r in rows}
    seen: dict[str, dict[str, object]] = {}
    for shard in shards:
        path = store.path(shard["uri"].removeprefix(store.url("")).lstrip("/"))
        samples = list(wds.WebDataset(path, shardshuffle=False, empty_check=False))
        assert len(samples) == shard["samples"]
        for sample in samples:
            meta = json.loads(sample["json"])
            payload = sample[meta["payload"].split(".", 1)[1]]
            assert sample["__key__"] not in seen, "sample keys are unique"
            assert meta["split"] == shard["split"]
            seen[sample["__key__"]] = {**meta, "sha256": hashlib.sha256(payload).hexdigest()}
    assert len(seen) == len(rows)
    for row in rows:
        sample = seen[_key(row)]
        assert sample["source_sha256"] == row["source_sha256"]
        # the bytes are those of the artifact the row names (the clip Sluice made, not the vendor's file)
        artifact = store.path(sample["artifact_uri"])  # relative to the store
        data = Path(artifact).read_bytes()
        assert sample["sha256"] == sample["artifact_sha256"] == hashlib.sha256(data).hexdigest()
        assert sample["artifact_size_bytes"] == len(data)
        assert store.url(sample["artifact_uri"]) == row["uri"]
        assert not str(sample["artifact_uri"]).startswith(("/", "file:"))
    # every split's shards go to the two ranks, whole, and a rank of one split reads only that split
    ranks = result["ranks"]
    assert isinstance(ranks, dict) and set(ranks) == {s["split"] for s in shards}
    for split, per_rank in ranks.items():
        assert len(per_rank) == 2
        assert sorted(u for r in per_rank for u in r) == sorted(
            s["uri"] for s in shards if s["split"] == split
        )
    # the size target holds for every shard of more than one sample
    assert all(s["size_bytes"] <= 200 * 1024 for s in shards if s["samples"] > 1)
    assert any(s["samples"] > 1 for s in shards)

    # a second run finds every shard recorded and intact; --verify-only re-reads them
    again = _shard(training, version.ref, "--target-shard-bytes", "200 KiB")
    assert [s["uri"] for s in again["shards"]] == [s["uri"] for s in shards]  # type: ignore[index]
    assert all(s["ok"] for s in _shard(training, version.ref, "--verify-only")["shards"])  # type: ignore[index]
    # cut otherwise (the default target): refused as the user runs it, the recorded shards kept
    other = CliRunner().invoke(app, ["shard", version.ref], env=_env(training))
    assert other.exit_code != 0 and "is sharded already, otherwise" in str(other.exception), other.output
    assert [s["uri"] for s in _shard(training, version.ref, "--verify-only")["shards"]] == [  # type: ignore[index]
        s["uri"] for s in shards
    ]

    # more ranks than a split has shards: the ranks left without one are named, and the user warned
    world = max(sum(1 for s in shards if s["split"] == split) for split in ranks) + 1
    done = CliRunner().invoke(
        app,
        ["shard", version.ref, "--verify-only", "--world-size", str(world), "--json"],
        env=_env(training),
        catch_exceptions=False,
    )
    assert done.exit_code == 0, done.output
    wide = json.loads(done.stdout)
    idle = wide["ranks_without_shards"]
    assert set(idle) == set(ranks)
    for split, per_rank in wide["ranks"].items():
        assert idle[split] == [rank for rank, uris in enumerate(per_rank) if not uris]
        assert len(idle[split]) >= world - sum(1 for s in shards if s["split"] == split)
        assert f"warning: {split}: " in done.stderr and f"for {world} ranks" in done.stderr


def test_shard_step_packs_a_video_episode_as_its_clips(training: TrainingWorld) -> None:
    from sluice_world import batch_items

    from pipeline.annotate.inputs import episode_clips
    from pipeline.steps.runner import run_step
    from pipeline.steps.shard import ShardStep

    summary = run_step(
        ShardStep(training.video, training.world.ctx), batch_items(training.video_drop, "*.mp4")
    )
    assert (summary.succeeded, summary.failed) == (len(training.video_episodes), 0)
    store = training.world.ctx.store
    for episode_id in training.video_episodes.values():
        clips = episode_clips(training.world.ctx.engine, episode_id)
        shards = sorted(store.fs.glob(store.path(f"shards/_episodes/*/{episode_id}/shard-*.tar")))
        samples = [
            (s["__key__"], s)
            for path in shards
            for s in wds.WebDataset(path, shardshuffle=False, empty_check=False)
        ]
        assert [k for k, _ in samples] == [
            f"e{episode_id}-{json.loads(m['json'])['source_sha256']}-c{c.clip_index:03d}"
            for (_, m), c in zip(samples, clips, strict=True)
        ]
        for (_, members), clip in zip(samples, clips, strict=True):
            assert hashlib.sha256(members["mp4"]).hexdigest() == clip.sha256  # Sluice's clip, not the raw MP4


def _key(row: dict[str, object]) -> str:
    clip = row["clip_index"]
    return f"e{row['episode_id']}-{row['source_sha256']}" + ("" if clip is None else f"-c{clip:03d}")
