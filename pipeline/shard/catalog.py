"""Reading shards back: through their catalog records only, never by listing the store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pipeline.shard.verify import Verification
    from pipeline.store import Store


@dataclass(frozen=True)
class ShardRecord:
    shard_id: int
    artifact_id: int
    uri: str
    sha256: str
    size_bytes: int
    n_samples: int
    n_episodes: int
    split: str | None
    shard_index: int | None


def list_shards(engine: Engine, dataset_version_id: int, split: str | None = None) -> list[ShardRecord]:
    """The recorded shards of a dataset version (optionally one split), by split and index."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Artifact, Shard

    stmt = (
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
        )
        .join(Artifact, Artifact.id == Shard.artifact_id)
        .where(Shard.dataset_version_id == dataset_version_id)
        .order_by(Shard.split, Shard.shard_index)
    )
    if split is not None:
        stmt = stmt.where(Shard.split == split)
    with session_scope(make_session_factory(engine)) as session:
        return [ShardRecord(*row) for row in session.execute(stmt).tuples()]


def verify_shards(store: Store, shards: list[ShardRecord]) -> list[Verification]:
    """Verify each recorded shard against its index and its record (size, sha256, sample count)."""
    import fsspec

    from pipeline.shard.verify import ShardIndex, Verification, index_path, verify_file

    out = []
    for shard in shards:
        fs, path = fsspec.core.url_to_fs(shard.uri)
        try:
            index = ShardIndex.from_json(fs.cat_file(index_path(path)))
        except FileNotFoundError:
            out.append(Verification(shard.uri, ["member index is missing"]))
            continue
        except (ValueError, KeyError) as exc:
            out.append(Verification(shard.uri, [f"member index is unreadable: {exc}"]))
            continue
        out.append(
            verify_file(
                fs,
                path,
                index,
                expected_sha256=shard.sha256,
                expected_size_bytes=shard.size_bytes,
                expected_samples=shard.n_samples,
            )
        )
    return out
