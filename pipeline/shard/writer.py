"""Write a dataset version's WebDataset shards: whole or absent, verified, then recorded.

For each shard: stream its samples into a staging file in the store's ``tmp/`` area (hashing as it goes),
fsync, verify the staged file against the member index built while writing, publish the index and then the
shard by rename, and only then record the shard (artifact with lineage + shard row) in one transaction.
Readers list shards through those records only (:func:`pipeline.shard.catalog.list_shards`), so a process
killed at any point leaves at most an unrecorded file, which no reader sees and which a re-run overwrites
with the same bytes (shards are deterministic). A shard already recorded and intact is not rewritten.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tarfile
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import IO, TYPE_CHECKING, Any

import fsspec

from pipeline.enums import ArtifactKind, StepName
from pipeline.errors import StoreError
from pipeline.shard.errors import ShardInputError, ShardVerifyError
from pipeline.shard.format import SAMPLE_JSON, SHARD_PATTERN, TAR_BLOCK, member_bytes, sample_key, shard_dir
from pipeline.shard.verify import Member, ShardIndex, index_path, verify_file
from pipeline.store import fsync_path

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pipeline.store import Store

log = logging.getLogger(__name__)

#: Copy size when streaming a payload into a shard.
COPY_BLOCK_BYTES = 8 << 20
#: The split of samples whose rows carry none (per-episode shards of the shard step).
NO_SPLIT = ""


@dataclass(frozen=True)
class SampleSpec:
    """One sample: an artifact (an episode's, or one clip of a video) and the manifest rows (time windows)
    that point at it."""

    key: str
    episode_id: int
    source_sha256: str
    uri: str
    ext: str
    size_bytes: int
    split: str
    rows: tuple[Mapping[str, Any], ...]

    @property
    def tar_bytes(self) -> int:
        """Estimated bytes in the tar (the JSON member is small; 4 KiB covers it and its PAX header)."""
        return member_bytes(self.size_bytes) + 4096


@dataclass(frozen=True)
class ShardInfo:
    """One published and recorded shard."""

    split: str
    index: int
    key: str  # store key of the tar
    uri: str
    sha256: str
    size_bytes: int
    n_samples: int
    n_episodes: int
    artifact_id: int
    shard_id: int
    written: bool  # False when an intact recorded shard was kept


@dataclass
class ShardPlan:
    """Samples per shard, per split, in order."""

    shards: dict[str, list[list[SampleSpec]]] = field(default_factory=dict)

    @property
    def n_shards(self) -> int:
        return sum(len(v) for v in self.shards.values())


def plan_samples(rows: Iterable[Mapping[str, Any]]) -> list[SampleSpec]:
    """Group manifest rows into samples: one per (split, episode, artifact URI), in first-seen order.

    A row with a ``clip_index`` (a clip of a video episode) gives its sample a key of its own; rows of one
    artifact must agree on it.
    """
    grouped: dict[tuple[str, int, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        try:
            episode_id = int(row["episode_id"])
            uri = str(row["uri"])
            sha = str(row["source_sha256"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ShardInputError(
                f"manifest row {dict(row)!r} lacks episode_id, uri or source_sha256: {exc}"
            ) from None
        split = row.get("split")
        grouped.setdefault((NO_SPLIT if split is None else str(split), episode_id, uri), []).append(
            {**row, "source_sha256": sha}
        )
    samples = []
    for (split, episode_id, uri), group in grouped.items():
        shas = {r["source_sha256"] for r in group}
        if len(shas) != 1:
            raise ShardInputError(f"episode {episode_id} rows name {len(shas)} different source sha256s")
        clips = {r.get("clip_index") for r in group}
        if len(clips) != 1:
            raise ShardInputError(
                f"episode {episode_id}: rows of {uri} name clip indices {sorted(map(str, clips))}"
            )
        clip = clips.pop()
        fs, path = fsspec.core.url_to_fs(uri)
        try:
            size = int(fs.size(path))
        except FileNotFoundError:
            raise ShardInputError(f"episode {episode_id}: artifact {uri} does not exist") from None
        ext = PurePosixPath(path).suffix.lstrip(".").lower() or _sniff_ext(fs, path)
        samples.append(
            SampleSpec(
                key=sample_key(episode_id, shas.pop(), None if clip is None else int(clip)),
                episode_id=episode_id,
                source_sha256=group[0]["source_sha256"],
                uri=uri,
                ext=ext,
                size_bytes=size,
                split=split,
                rows=tuple(group),
            )
        )
    return samples


def _sniff_ext(fs: Any, path: str) -> str:
    """The payload's extension from its first bytes (raw store objects are named by hash, not type)."""
    with fs.open(path, "rb") as fh:
        head = fh.read(12)
    if head.startswith(b"\x89MCAP"):
        return "mcap"
    if head[4:8] == b"ftyp":
        return "mp4"
    return "bin"


def pack(samples: Sequence[SampleSpec], target_shard_bytes: int) -> ShardPlan:
    """Cut each split's samples, in order, into shards of at most ``target_shard_bytes`` (a sample larger
    than the target gets a shard of its own)."""
    if target_shard_bytes <= 0:
        raise ValueError(f"target_shard_bytes={target_shard_bytes}; allowed: > 0")
    plan = ShardPlan()
    for sample in samples:
        shards = plan.shards.setdefault(sample.split, [[]])
        current = shards[-1]
        used = sum(s.tar_bytes for s in current)
        if current and used + sample.tar_bytes > target_shard_bytes:
            shards.append([sample])
        else:
            current.append(sample)
    return plan


def write_shards(
    rows: Iterable[Mapping[str, Any]],
    target_shard_bytes: int,
    store: Store,
    dataset: str,
    version: str,
    *,
    engine: Engine,
    config_hash: str,
    code_version: str,
    dataset_version_id: int | None = None,
    step: StepName | None = StepName.SHARD,
) -> list[ShardInfo]:
    """Write, verify, publish and record the shards of ``rows`` under ``shards/<dataset>/<version>/``.

    Shards are cut per split (``<split>/shard-NNNNNN.tar``; rows without a split go to the folder itself).
    Returns every shard of the plan, written now or kept from an earlier run.
    """
    plan = pack(plan_samples(rows), target_shard_bytes)
    base = shard_dir(dataset, version)
    recorded = _recorded_artifacts(engine, store, base)
    keyed = [
        (split, index, _shard_key(base, split, index), samples)
        for split, shards in sorted(plan.shards.items())
        for index, samples in enumerate(shards)
    ]
    indexes = _recorded_indexes(
        store, f"{dataset}@{version}", recorded, [(key, samples) for _, _, key, samples in keyed]
    )
    lineage = _lineage(engine, plan)
    out = [
        _write_one(
            store,
            key,
            split,
            index,
            samples,
            recorded.get(store.url(key)),
            indexes.get(key),
            lineage,
            engine=engine,
            config_hash=config_hash,
            code_version=code_version,
            dataset_version_id=dataset_version_id,
            step=step,
        )
        for split, index, key, samples in keyed
    ]
    log.info("%s/%s: %d shard(s), %d written", dataset, version, len(out), sum(s.written for s in out))
    return out


def _shard_key(base: str, split: str, index: int) -> str:
    """Where shard ``index`` of ``split`` goes (rows without a split: the version's folder itself)."""
    return "/".join(part for part in (base, split, SHARD_PATTERN.format(index=index)) if part)


def _recorded_indexes(
    store: Store,
    dataset_version: str,
    recorded: Mapping[str, tuple[str, int]],
    planned: Sequence[tuple[str, list[SampleSpec]]],
) -> dict[str, ShardIndex | None]:
    """The member index of every recorded shard of the plan, by key (None: missing or unreadable, so the
    plan writes it again), read once here for :func:`_write_one`.

    Raises :class:`ShardPlanConflictError` when shards are recorded for the version that this plan would
    not write as they are: one the plan has no place for, or one whose samples differ."""
    from pipeline.shard.errors import ShardPlanConflictError

    if not recorded:
        return {}
    urls = {store.url(key): (key, samples) for key, samples in planned}
    beyond = sorted(set(recorded) - set(urls))
    if beyond:
        raise ShardPlanConflictError(
            dataset_version,
            f"{len(recorded)} shard(s) are recorded and this plan cuts {len(planned)}; "
            f"{beyond[0]} has no place in it",
        )
    indexes: dict[str, ShardIndex | None] = {}
    for url, (key, samples) in urls.items():
        if url not in recorded:
            continue
        existing = indexes[key] = _read_index(store, store.path(key))
        if existing is None:
            continue
        held = sorted({m.name.split(".", 1)[0] for m in existing.members})
        if held != sorted({s.key for s in samples}):
            raise ShardPlanConflictError(
                dataset_version,
                f"{url} holds {len(held)} sample(s) ({', '.join(held[:3])}{', ...' if len(held) > 3 else ''}) "
                f"where this plan puts {len(samples)}",
            )
    return indexes


def _write_one(
    store: Store,
    key: str,
    split: str,
    index: int,
    samples: list[SampleSpec],
    recorded: tuple[str, int] | None,
    existing: ShardIndex | None,
    lineage: tuple[dict[str, int], dict[str, int]],
    *,
    engine: Engine,
    config_hash: str,
    code_version: str,
    dataset_version_id: int | None,
    step: StepName | None,
) -> ShardInfo:
    final = store.path(key)
    n_episodes = len({s.episode_id for s in samples})

    def recorded_as(record: ShardIndex, *, written: bool) -> ShardInfo:
        ids = _record(
            engine, store, key, record, split, index, samples, lineage, config_hash, code_version,
            dataset_version_id, step,
        )  # fmt: skip
        return ShardInfo(
            split,
            index,
            key,
            store.url(key),
            record.sha256,
            record.size_bytes,
            record.n_samples,
            record.n_episodes,
            *ids,
            written=written,
        )

    if recorded is not None:
        if existing is not None:
            check = verify_file(
                store.fs, final, existing, expected_sha256=recorded[0], expected_size_bytes=recorded[1]
            )
            if check.ok:
                return recorded_as(existing, written=False)
        log.warning("recorded shard %s is missing or damaged; writing it again", store.url(key))
    staging = store.path(f"tmp/{uuid.uuid4().hex}.tar.part")
    try:
        store.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
        store.fs.makedirs(staging.rsplit("/", 1)[0], exist_ok=True)
        index_record = _write_tar(store, staging, final.rsplit("/", 1)[1], samples, n_episodes)
        check = verify_file(store.fs, staging, index_record)
        if not check.ok:
            raise ShardVerifyError(staging, check.problems)
        if recorded is not None and recorded[0] != index_record.sha256:
            from pipeline.catalog.errors import CatalogConflictError

            raise CatalogConflictError("sha256 of shard", store.url(key), recorded[0], index_record.sha256)
        _publish_bytes(store, index_path(final), index_record.to_json())
        _publish_file(store, staging, final)
    finally:
        if store.fs.exists(staging):
            store.fs.rm(staging)
    return recorded_as(index_record, written=True)


class _HashingWriter(io.RawIOBase):
    """A write-only file that hashes and counts what passes through it to ``target``."""

    def __init__(self, target: IO[bytes]) -> None:
        self.target = target
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.target.write(view)
        self.digest.update(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size


class _HashingReader:
    def __init__(self, source: IO[bytes]) -> None:
        self.source = source
        self.digest = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.source.read(n)
        self.digest.update(data)
        return data


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o444
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_tar(
    store: Store, staging: str, name: str, samples: list[SampleSpec], n_episodes: int
) -> ShardIndex:
    members: list[Member] = []
    with store.fs.open(staging, "wb") as raw:
        out = _HashingWriter(raw)
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for sample in samples:
                fs, path = fsspec.core.url_to_fs(sample.uri)
                with fs.open(path, "rb") as src:
                    reader = _HashingReader(src)
                    payload = f"{sample.key}.{sample.ext}"
                    info = _tarinfo(payload, sample.size_bytes)
                    tar.addfile(info, reader)
                    members.append(
                        Member(payload, _data_offset(tar, info), sample.size_bytes, reader.digest.hexdigest())
                    )
                meta = json.dumps(
                    {
                        "key": sample.key,
                        "episode_id": sample.episode_id,
                        "source_sha256": sample.source_sha256,
                        "artifact_uri": _relative(store, sample.uri),
                        "artifact_sha256": reader.digest.hexdigest(),
                        "artifact_size_bytes": sample.size_bytes,
                        "payload": payload,
                        "split": sample.split or None,
                        "rows": [
                            {**row, "uri": _relative(store, str(row["uri"]))} if "uri" in row else dict(row)
                            for row in sample.rows
                        ],
                    },
                    sort_keys=True,
                    separators=(",", ":"),
                    default=str,
                ).encode()
                info = _tarinfo(f"{sample.key}.{SAMPLE_JSON}", len(meta))
                tar.addfile(info, io.BytesIO(meta))
                members.append(
                    Member(info.name, _data_offset(tar, info), len(meta), hashlib.sha256(meta).hexdigest())
                )
        if store.local:
            raw.flush()
            os.fsync(raw.fileno())
    return ShardIndex(
        shard=name,
        size_bytes=out.size,
        sha256=out.digest.hexdigest(),
        n_samples=len(samples),
        n_episodes=n_episodes,
        members=tuple(members),
    )


def _relative(store: Store, uri: str) -> str:
    """``uri`` as a key of ``store`` (what a shard records), or unchanged when it lies outside the store."""
    key = store.key_of(uri)
    return uri if key is None else key


def _data_offset(tar: tarfile.TarFile, info: tarfile.TarInfo) -> int:
    """Where the data of the member just added starts: the archive's end minus its padded data."""
    return int(tar.offset) - -(-info.size // TAR_BLOCK) * TAR_BLOCK


def _read_index(store: Store, final: str) -> ShardIndex | None:
    try:
        return ShardIndex.from_json(store.fs.cat_file(index_path(final)))
    except (FileNotFoundError, ValueError, KeyError):
        return None


def _publish_file(store: Store, staging: str, final: str) -> None:
    try:
        if store.local:
            os.replace(staging, final)
            fsync_path(os.path.dirname(final))
        else:
            store.fs.mv(staging, final)
    except OSError as exc:
        raise StoreError(f"cannot publish {final}: {exc}") from exc


def _publish_bytes(store: Store, final: str, data: bytes) -> None:
    staging = store.path(f"tmp/{uuid.uuid4().hex}.part")
    try:
        if store.local:
            with open(staging, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        else:
            store.fs.pipe_file(staging, data)
    except OSError as exc:
        raise StoreError(f"cannot stage {final}: {exc}") from exc
    _publish_file(store, staging, final)


def _recorded_artifacts(engine: Engine, store: Store, base: str) -> dict[str, tuple[str, int]]:
    """uri -> (sha256, size) of the shard artifacts already recorded under ``base``."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Artifact

    prefix = store.url(base) + "/"
    with session_scope(make_session_factory(engine)) as session:
        rows = session.execute(
            select(Artifact.uri, Artifact.sha256, Artifact.size_bytes).where(
                Artifact.kind == ArtifactKind.SHARD.value, Artifact.uri.startswith(prefix, autoescape=True)
            )
        ).all()
    return {r.uri: (r.sha256, r.size_bytes) for r in rows}


def _lineage(engine: Engine, plan: ShardPlan) -> tuple[dict[str, int], dict[str, int]]:
    """(artifact uri -> artifact id, source sha256 -> blob id) for every sample of the plan."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Artifact, Blob

    uris = sorted({s.uri for shards in plan.shards.values() for shard in shards for s in shard})
    shas = sorted({s.source_sha256 for shards in plan.shards.values() for shard in shards for s in shard})
    with session_scope(make_session_factory(engine)) as session:
        artifacts = dict(
            session.execute(select(Artifact.uri, Artifact.id).where(Artifact.uri.in_(uris))).tuples().all()
        )
        blobs = dict(
            session.execute(select(Blob.sha256, Blob.id).where(Blob.sha256.in_(shas))).tuples().all()
        )
    return artifacts, blobs


def _record(
    engine: Engine,
    store: Store,
    key: str,
    index: ShardIndex,
    split: str,
    shard_index: int,
    samples: list[SampleSpec],
    lineage: tuple[dict[str, int], dict[str, int]],
    config_hash: str,
    code_version: str,
    dataset_version_id: int | None,
    step: StepName | None,
) -> tuple[int, int]:
    """Record the shard's artifact (inputs: the artifacts and raw blobs of its samples) and shard row."""
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.outputs import record_artifact, record_shard

    artifacts, blobs = lineage
    # A sample read straight from the raw store names its blob; one read from a derived artifact names both.
    input_artifacts = [artifacts[s.uri] for s in samples if s.uri in artifacts]
    input_blobs = [blobs[s.source_sha256] for s in samples if s.source_sha256 in blobs]
    with session_scope(make_session_factory(engine)) as session:
        artifact_id = record_artifact(
            session,
            kind=ArtifactKind.SHARD,
            uri=store.url(key),
            sha256=index.sha256,
            size_bytes=index.size_bytes,
            step=step,
            config_hash=config_hash,
            code_version=code_version,
            episode_id=samples[0].episode_id if index.n_episodes == 1 else None,
            input_artifact_ids=input_artifacts,
            input_blob_ids=input_blobs,
        )
        shard_id = record_shard(
            session,
            artifact_id=artifact_id,
            n_episodes=index.n_episodes,
            n_samples=index.n_samples,
            dataset_version_id=dataset_version_id,
            split=split or None,
            shard_index=shard_index,
        )
    return artifact_id, shard_id
