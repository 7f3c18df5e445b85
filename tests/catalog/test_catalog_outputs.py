"""Artifacts with lineage, annotations, dataset versions, shards and manifests, as the writer role."""

from __future__ import annotations

import hashlib

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from pipeline.catalog import repo
from pipeline.catalog.errors import CatalogConflictError
from pipeline.catalog.models import Annotation, ArtifactInput, DatasetVersionEpisode, Shard
from pipeline.enums import ArtifactKind, Split
from pipeline.errors import UnknownChoiceError

pytestmark = pytest.mark.integration


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def episode(writer_session: Session) -> tuple[int, int]:
    """(episode id, blob id)"""
    vendor_id = repo.upsert_vendor(writer_session, name="acme", kind="mcap", config_hash="c", config={})
    blob_id = repo.register_blob(writer_session, sha256=_sha("raw"), size_bytes=3, raw_uri="raw/x")
    source = repo.register_source_file(writer_session, vendor_id=vendor_id, path="x.mcap", blob_id=blob_id)
    ref = repo.ensure_episode(
        writer_session, vendor_id=vendor_id, source_file_id=source.id, blob_id=blob_id, kind="mcap"
    )
    return ref.id, blob_id


def _artifact(session: Session, uri: str, episode_id: int | None = None, **inputs: list[int]) -> int:
    return repo.record_artifact(
        session, kind="transcoded_episode", uri=uri, sha256=_sha(uri), size_bytes=100, step="transcode",
        config_hash="t1", code_version="0.1.0", episode_id=episode_id, **inputs,
    )  # fmt: skip


def test_artifact_lineage_is_recorded_once(writer_session: Session, episode: tuple[int, int]) -> None:
    episode_id, blob_id = episode
    transcoded = _artifact(
        writer_session, "derived/transcode/t1/1/episode.mcap", episode_id, input_blob_ids=[blob_id]
    )
    again = _artifact(
        writer_session, "derived/transcode/t1/1/episode.mcap", episode_id, input_blob_ids=[blob_id, blob_id]
    )
    assert again == transcoded
    clip = _artifact(writer_session, "derived/clip/1.mp4", episode_id, input_artifact_ids=[transcoded])
    shard = repo.record_artifact(
        writer_session, kind=ArtifactKind.SHARD, uri="shards/ds/1/000.tar", sha256=_sha("shard"),
        size_bytes=5,
        step="shard", config_hash="s1", code_version="0.1.0", input_artifact_ids=[transcoded, clip],
    )  # fmt: skip
    repo.record_artifact(
        writer_session, kind=ArtifactKind.SHARD, uri="shards/ds/1/000.tar", sha256=_sha("shard"),
        size_bytes=5,
        step="shard", config_hash="s1", code_version="0.1.0", input_artifact_ids=[clip],
    )  # fmt: skip
    assert repo.artifact_inputs(writer_session, transcoded) == ([], [blob_id])
    assert repo.artifact_inputs(writer_session, shard) == (sorted([transcoded, clip]), [])
    assert writer_session.execute(sa.select(sa.func.count()).select_from(ArtifactInput)).scalar_one() == 4
    with pytest.raises(CatalogConflictError, match=r"sha256 of artifact 'derived/clip/1\.mp4'"):
        repo.record_artifact(
            writer_session, kind="clip", uri="derived/clip/1.mp4", sha256=_sha("different"), size_bytes=1,
            step="transcode", config_hash="t1", code_version="0.1.0",
        )  # fmt: skip
    manifest_like = repo.record_artifact(
        writer_session, kind="export", uri="exports/x.parquet", sha256=_sha("e"), size_bytes=1,
        step=None, config_hash="x", code_version="0.1.0",
    )  # fmt: skip
    assert manifest_like > 0
    with pytest.raises(UnknownChoiceError, match="artifact kind 'video'"):
        repo.record_artifact(
            writer_session, kind="video", uri="u", sha256=_sha("u"), size_bytes=1, step=None,
            config_hash="x", code_version="0",
        )  # fmt: skip


def test_a_new_annotator_version_adds_rows(writer_session: Session, episode: tuple[int, int]) -> None:
    episode_id, _ = episode
    key = {"episode_id": episode_id, "annotator": "captioner", "key": "caption"}
    v1 = repo.record_annotation(writer_session, **key, annotator_version="1", value="a robot picks a cup")
    rerun = repo.record_annotation(
        writer_session, **key, annotator_version="1", value="a robot picks up a cup"
    )
    v2 = repo.record_annotation(
        writer_session, **key, annotator_version="2", value={"text": "pick cup", "p": 0.9}
    )
    assert v1 == rerun != v2
    rows = writer_session.execute(
        sa.select(Annotation.annotator_version, Annotation.value).order_by(Annotation.annotator_version)
    ).all()
    assert [tuple(r) for r in rows] == [
        ("1", "a robot picks up a cup"),
        ("2", {"text": "pick cup", "p": 0.9}),
    ]


def test_dataset_version_manifest_and_shards(writer_session: Session, episode: tuple[int, int]) -> None:
    episode_id, _ = episode
    version = repo.create_dataset_version(
        writer_session, name="pick", version="2025.11", spec_hash="h1", spec={"sql": "SELECT 1"}
    )
    same = repo.create_dataset_version(
        writer_session, name="pick", version="2025.11", spec_hash="h1", spec={}
    )
    assert same == version
    with pytest.raises(CatalogConflictError, match=r"'pick@2025\.11' is recorded as 'h1'"):
        repo.create_dataset_version(writer_session, name="pick", version="2025.11", spec_hash="h2", spec={})

    assert repo.add_dataset_episodes(writer_session, version, [(episode_id, Split.TRAIN)]) == 1
    assert repo.add_dataset_episodes(writer_session, version, [(episode_id, "train")]) == 1
    pairs = writer_session.execute(
        sa.select(DatasetVersionEpisode.episode_id, DatasetVersionEpisode.split)
    ).all()
    assert [tuple(p) for p in pairs] == [(episode_id, "train")]

    manifest = repo.record_manifest(
        writer_session, dataset_version_id=version, format="parquet", uri="manifests/pick/2025.11/m.parquet",
        sha256=_sha("m"), size_bytes=10, row_count=1,
    )  # fmt: skip
    again = repo.record_manifest(
        writer_session, dataset_version_id=version, format="parquet", uri="manifests/pick/2025.11/m.parquet",
        sha256=_sha("m"), size_bytes=10, row_count=1,
    )  # fmt: skip
    assert manifest == again
    with pytest.raises(CatalogConflictError, match="manifest"):
        repo.record_manifest(
            writer_session, dataset_version_id=version, format="parquet",
            uri="manifests/pick/2025.11/m.parquet", sha256=_sha("other"), size_bytes=10, row_count=1,
        )  # fmt: skip
    with pytest.raises(UnknownChoiceError, match="manifest format 'csv'"):
        repo.record_manifest(
            writer_session, dataset_version_id=version, format="csv", uri="m.csv",
            sha256=_sha("c"), size_bytes=1, row_count=1,
        )  # fmt: skip

    shard_artifact = repo.record_artifact(
        writer_session, kind="shard", uri="shards/pick/000.tar", sha256=_sha("s"), size_bytes=5,
        step="shard", config_hash="s1", code_version="0.1.0",
    )  # fmt: skip
    shard = repo.record_shard(writer_session, artifact_id=shard_artifact, n_episodes=1, n_samples=40)
    placed = repo.record_shard(
        writer_session, artifact_id=shard_artifact, n_episodes=1, n_samples=40,
        dataset_version_id=version, split="train", shard_index=0,
    )  # fmt: skip
    assert placed == shard
    row = writer_session.execute(sa.select(Shard.dataset_version_id, Shard.split, Shard.shard_index)).one()
    assert tuple(row) == (version, "train", 0)
