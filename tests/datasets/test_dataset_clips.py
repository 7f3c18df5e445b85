"""A dataset over a video vendor lists the clips its transcode wrote: real clips, real catalog, real loader."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import av
import pyarrow as pa
import pytest
import sqlalchemy as sa
from synthetic_catalog import SyntheticCatalog

from pipeline.catalog.models import ArtifactInput, DatasetVersionEpisode
from pipeline.config import ClipOptions, load_vendor
from pipeline.datasets import DatasetBuildError, DatasetSpec, DatasetVersion, get_version
from pipeline.enums import FileState
from pipeline.manifest import open_manifest
from pipeline.media.framecode import read_frame_index
from pipeline.steps.transcode import output_key
from pipeline.store import Store
from pipeline.synth.video import ClipMedia, ClipSpec, write_clip
from pipeline.transcode.clips import CLIPS_MANIFEST, ClipOutput, transform_video
from pipeline.transcode.publish import sha256_file
from pipeline.warehouse import run_query

pytestmark = pytest.mark.integration

Build = Callable[[DatasetSpec], DatasetVersion]
REPO = Path(__file__).resolve().parents[2]
FPS = 30
CONFIG = "c1" * 32  # the transcode config hash the clips were made under


@pytest.fixture(scope="module")
def clip_set(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[ClipOutput]]:
    """A 3 s vendor video with the frame index in its pixels, cut into clips of at most 1 s by the real
    video transform (once; each episode gets a copy)."""
    folder = tmp_path_factory.mktemp("clips")
    source = folder / "source.mp4"
    write_clip(source, ClipSpec("c", "source.mp4", 3.0, seed=3, scene_cuts=0), ClipMedia())
    vendor = load_vendor(REPO / "dags" / "vendors" / "northwind_video.yaml")
    clips = ClipOptions(fps=FPS, max_clip_duration_s=1.0, min_clip_duration_s=0.5)
    options = vendor.transcode.model_copy(update={"clips": clips})
    out = folder / "out"
    out.mkdir()
    outputs = transform_video(source, out, options)
    assert len(outputs) >= 3
    return out, outputs


def _transcoded(
    catalog: SyntheticCatalog,
    store: Store,
    clip_set: tuple[Path, list[ClipOutput]],
    episode_id: int,
    blob_id: int,
    config_hash: str = CONFIG,
) -> list[str]:
    """Publish the clips in the store where the transcode step would and record them; returns their URIs."""
    folder, outputs = clip_set
    key = output_key(config_hash, episode_id)
    target = Path(store.path(key))
    shutil.copytree(folder, target)
    uris = [store.url(f"{key}/{o.file}") for o in outputs]
    with catalog.session() as s:
        catalog.clips(
            s, episode_id, blob_id, [(u, o.sha256, o.size_bytes) for u, o in zip(uris, outputs, strict=True)],
            config_hash,
        )  # fmt: skip
    return uris


def _spec(where: str, params: dict[str, object]) -> DatasetSpec:
    return DatasetSpec.model_validate(
        {
            "name": "kitchen_clips",
            "filter": {"where": where, "params": params},
            "splits": {"group_by": ["session_id"], "seed": 5, "val_fraction": 0.3, "eval_fraction": 0.3},
        }
    )


def _frames(path: str) -> list[int]:
    with av.open(path.removeprefix("file://")) as container:
        return [read_frame_index(f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]


def test_a_video_vendor_dataset_lists_the_accepted_clips(
    catalog: SyntheticCatalog,
    store: Store,
    build_now: Build,
    clip_set: tuple[Path, list[ClipOutput]],
    warehouse_path: Path,
    catalog_engine: sa.engine.Engine,
    tmp_path: Path,
) -> None:
    _, outputs = clip_set
    with catalog.session() as s:
        robot = catalog.episode(s, vendor="acme", session_id="r-s0")
        accepted = [catalog.video_episode(s, session_id=f"v-s{k}") for k in range(6)]
        quarantined = catalog.video_episode(s, session_id="v-q", state=FileState.QUARANTINED)
        untranscoded = catalog.video_episode(s, session_id="v-u")
    uris = {e: _transcoded(catalog, store, clip_set, e, b) for e, b in [*accepted, quarantined]}
    # a re-transcode under a new config: only the newer clips are the episode's clips
    renewed, renewed_blob = accepted[0]
    newer = "d2" * 32
    uris[renewed] = _transcoded(catalog, store, clip_set, renewed, renewed_blob, config_hash=newer)

    version = build_now(_spec("vendor = $vendor AND is_accepted", {"vendor": "northwind_video"}))

    assert version.counts["matched"] == 7 and version.counts["unusable"] == 1  # untranscoded has no clips
    assert version.row_count == 6 * len(outputs)
    # Rows and episodes differ for clips: each is counted as itself, by the build and by `dataset list`.
    assert sum(version.split_episodes.values()) == 6
    assert version.split_rows is not None and sum(version.split_rows.values()) == version.row_count
    assert all(version.split_rows[s] == n * len(outputs) for s, n in version.split_episodes.items())
    with catalog.session() as s:
        listed = get_version(s, version.name, version.version)
    assert (listed.split_episodes, listed.split_rows) == (version.split_episodes, version.split_rows)
    table = pa.ipc.open_file(pa.memory_map(str(version.manifest_uri).removeprefix("file://"))).read_all()
    rows = table.to_pylist()
    by_episode: dict[int, list[dict[str, object]]] = {}
    for row in rows:
        by_episode.setdefault(int(str(row["episode_id"])), []).append(row)
    assert set(by_episode) == {e for e, _ in accepted}  # not the robot, quarantined or untranscoded one
    assert robot not in by_episode and quarantined[0] not in by_episode and untranscoded[0] not in by_episode
    for episode_id, clips in by_episode.items():
        assert [r["uri"] for r in clips] == uris[episode_id]  # in clip order, the latest transcode's
        assert len({r["split"] for r in clips}) == 1  # a video's clips never straddle splits
        for row, output in zip(clips, outputs, strict=True):
            assert row["clip_index"] == output.index
            assert row["start_ns"] == 0 and row["end_ns"] == round(output.frames * 1e9 / FPS)
            assert row["duration_s"] == pytest.approx(output.frames / FPS)
            assert (row["source_start_ns"], row["source_end_ns"]) == (
                round(output.start_s * 1e9),
                round(output.end_s * 1e9),
            )
            assert row["robot_id"] is None and row["vendor"] == "northwind_video"
    assert all(f"/{newer}/" in str(r["uri"]) for r in by_episode[renewed])

    # each uri is a clip a loader can decode: as many frames as its window holds, consecutive source frames
    # from where the source window starts (within a frame: the cut points are floats), the clips in turn
    following = 0
    for row in by_episode[accepted[1][0]]:
        indices = _frames(str(row["uri"]))
        window_ns = int(str(row["end_ns"])) - int(str(row["start_ns"]))
        assert len(indices) == round(window_ns * FPS / 1e9)
        assert indices == list(range(indices[0], indices[0] + len(indices)))
        assert abs(indices[0] / FPS - int(str(row["source_start_ns"])) / 1e9) <= 1 / FPS + 1e-9
        assert indices[0] == following
        following = indices[-1] + 1

    # ranks share each split's clip rows
    for split, count in version.split_rows.items():
        shares = [
            open_manifest(version.manifest_uri, rank=r, world_size=2, cache_dir=tmp_path / "c", split=split)
            for r in range(2)
        ]
        assert sum(m.rows for m in shares) == count
        assert all(set(m.table.column("split").to_pylist()) <= {split} for m in shares)

    # the catalog: each episode once with its split, and the manifest's lineage names every clip
    with catalog_engine.connect() as conn:
        recorded = conn.execute(
            sa.select(DatasetVersionEpisode.episode_id).where(
                DatasetVersionEpisode.dataset_version_id == version.id
            )
        ).scalars()
        assert sorted(recorded) == sorted(by_episode)
        inputs = set(conn.execute(sa.select(ArtifactInput.input_artifact_id)).scalars())
    clip_ids = run_query(
        warehouse_path,
        "SELECT clip_artifact_id FROM episode_clips WHERE episode_id IN (SELECT unnest($ids))",
        {"ids": sorted(by_episode)},
    ).table.column(0)
    assert set(clip_ids.to_pylist()) <= inputs and len(clip_ids) == version.row_count

    view = run_query(
        warehouse_path,
        "SELECT episode_id, n_clips, clips_uri, transcoded_uri, transcode_config_hash FROM episode_view "
        "WHERE vendor = 'northwind_video' ORDER BY episode_id",
    ).table.to_pylist()
    counts = {r["episode_id"]: r["n_clips"] for r in view}
    assert counts[untranscoded[0]] == 0 and counts[renewed] == len(outputs)
    renewed_row = next(r for r in view if r["episode_id"] == renewed)
    assert renewed_row["transcode_config_hash"] == newer and renewed_row["transcoded_uri"] is None
    assert renewed_row["clips_uri"] == store.url(f"{output_key(newer, renewed)}/{CLIPS_MANIFEST}")


def test_robot_episodes_and_clips_share_one_manifest(
    catalog: SyntheticCatalog, store: Store, build_now: Build, clip_set: tuple[Path, list[ClipOutput]]
) -> None:
    _, outputs = clip_set
    with catalog.session() as s:
        robots = [catalog.episode(s, vendor="acme", session_id=f"r-s{k}") for k in range(4)]
        videos = [catalog.video_episode(s, session_id=f"v-s{k}") for k in range(2)]
    for episode_id, blob_id in videos:
        _transcoded(catalog, store, clip_set, episode_id, blob_id)

    version = build_now(_spec("vendor IN $vendors AND is_accepted", {"vendors": ["acme", "northwind_video"]}))

    assert version.counts["unusable"] == 0
    assert version.row_count == len(robots) + 2 * len(outputs)
    table = pa.ipc.open_file(pa.memory_map(str(version.manifest_uri).removeprefix("file://"))).read_all()
    robot_rows = [r for r in table.to_pylist() if r["vendor"] == "acme"]
    assert len(robot_rows) == len(robots)
    assert all(r["uri"].endswith("/episode.mcap") and r["clip_index"] is None for r in robot_rows)
    assert all(r["source_start_ns"] is None and r["start_ns"] > 0 for r in robot_rows)
    order = {"train": 0, "val": 1, "eval": 2}
    ranks = [order[s] for s in table.column("split").to_pylist()]
    assert ranks == sorted(ranks)  # still train, val, eval


def test_a_clip_list_that_disagrees_with_the_catalog_stops_the_build(
    catalog: SyntheticCatalog, store: Store, build_now: Build, clip_set: tuple[Path, list[ClipOutput]]
) -> None:
    with catalog.session() as s:
        episode_id, blob_id = catalog.video_episode(s)
    uris = _transcoded(catalog, store, clip_set, episode_id, blob_id)
    listed = Path(store.path(output_key(CONFIG, episode_id))) / CLIPS_MANIFEST
    document = json.loads(listed.read_text())
    document["clips"][1]["sha256"] = sha256_file(listed)[0]  # some other file's digest
    listed.write_text(json.dumps(document))

    with pytest.raises(DatasetBuildError, match="does not list with the same sha256") as caught:
        build_now(_spec("is_accepted", {}))
    assert uris[1] in str(caught.value)
