"""``build(spec)``: a new immutable dataset version from the warehouse, recorded in the catalog.

One build, in one catalog transaction that holds a per-dataset advisory lock (two builders of one dataset
run one after the other; builders of different datasets do not wait):

1. read the frozen evaluation set of the dataset from the catalog;
2. select the rows in the warehouse (:mod:`.select`), on a read-only sandboxed connection;
3. write the manifest (:func:`pipeline.manifest.write_manifest`: Arrow IPC + Parquet, sha256, rows) to a
   staging folder;
4. if the dataset's latest version has the same spec hash, the same manifest sha256 and the same
   near-duplicate report, nothing changed:
   return that version (``created=False``), after re-hashing its stored manifest files and putting back,
   from the staging copy, any that went missing or changed (only when the copy has the recorded sha256),
   then discard the staging copy;
5. otherwise publish the files by rename under ``manifests/<dataset>/<version>/`` in the store, then record
   the version (its spec, with the near-duplicate report of the selection: which episode each dropped
   near-duplicate lost to), both manifest files, the episodes with their splits, and the lineage: the
   manifest as an artifact whose inputs are the transcoded artifacts (episodes and clips) it points at and
   the raw blobs they came from.

Same spec over the same catalog gives byte-identical files (the selection is ordered and the writer is
deterministic), so step 4 is also what makes repeated builds idempotent.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.catalog.engine import make_session_factory, session_scope
from pipeline.catalog.models import Manifest, ManifestFormat
from pipeline.catalog.outputs import (
    INSERT_CHUNK_ROWS,
    add_dataset_episodes,
    create_dataset_version,
    record_artifact,
    record_manifest,
)
from pipeline.datasets.clips import store_reader
from pipeline.datasets.errors import DatasetBuildError
from pipeline.datasets.select import Selection, select_rows
from pipeline.datasets.spec import DatasetSpec, spec_hash
from pipeline.datasets.versions import (
    DatasetVersion,
    frozen_eval_episodes,
    latest_version,
    next_version,
    spec_record,
    split_warnings,
)
from pipeline.enums import ArtifactKind, Split
from pipeline.errors import StoreError
from pipeline.manifest.format import (
    IPC_FILE_NAME,
    PARQUET_FILE_NAME,
    SUMS_FILE_NAME,
    ManifestFiles,
    publish_file,
    write_manifest,
)
from pipeline.store import MANIFESTS, TMP, Store, StoredObject, fsync_path
from pipeline.version import code_version
from pipeline.warehouse.connection import WarehouseLimits, open_warehouse, statement_deadline

log = logging.getLogger(__name__)

#: Key of a version's recorded spec listing the episodes ``exclude`` removed, with why.
EXCLUDED_KEY = "excluded"
#: The selection's integer episode id column (a lineage column, not in the manifest).
EPISODE_ID_INT = "episode_id_int"
#: First key of the per-dataset advisory locks (``pg_advisory_xact_lock(int4, int4)``); any fixed int4.
DATASET_LOCK_NAMESPACE = 0x0DA7A5E7
#: A scrub finding's problem, as a build's warning says it.
_DAMAGE = {"hash": "changed", "size": "of another size"}


def build(
    spec: DatasetSpec,
    *,
    engine: Engine,
    warehouse_path: Path | str,
    store: Store,
    limits: WarehouseLimits | None = None,
    exclude: Mapping[int, list[str]] | None = None,
) -> DatasetVersion:
    """Build a new version of ``spec``'s dataset (or return the latest one if it is identical).

    ``engine`` must be allowed to write dataset versions (the ingest writer role is); the warehouse should
    be synced first (``pipeline.warehouse.sync``) so that it shows the catalog's current state.
    ``exclude`` (episode id -> why; :func:`pipeline.annotate.recall.recalled_episodes`) removes episodes
    after selection, so the others keep their splits; the version records which left and why.
    """
    digest = spec_hash(spec)
    with session_scope(make_session_factory(engine)) as session:
        _lock(session, spec.name)
        frozen = frozen_eval_episodes(session, spec.name)
        limits = limits or WarehouseLimits()
        con = open_warehouse(warehouse_path, read_only=True, limits=limits)
        try:
            with statement_deadline(con, limits, spec.filter.where):
                selection = select_rows(con, spec, frozen, store_reader(store))
        finally:
            con.close()
        selection, excluded = _without(selection, exclude or {})
        if selection.table.num_rows == 0:
            counts = selection.counts
            hint = (
                ": none of the episodes it matched can be trained on yet (a robot log needs its transcode, a "
                "video its clips, both a recorded start and end): run the vendor's transcode step "
                "(`sluice run`) first"
                if counts.get("matched") and counts.get("unusable") == counts.get("matched")
                else ""
            )
            raise DatasetBuildError(
                spec.name, f"no episode left to put in a version (counts: {counts}){hint}"
            )
        empty_train = [
            w
            for w in split_warnings(spec.model_dump(mode="json"), selection.split_episodes())
            if w.startswith(f"split {Split.TRAIN.value} ")
        ]
        if empty_train:  # a version to train on with nothing to train on: every rank would get no batch
            raise DatasetBuildError(
                spec.name,
                f"{empty_train[0]}; lower splits.val_fraction and eval_fraction (both 0: every episode in train), "
                "group by something finer, or select more episodes",
            )
        staging = _staging_dir(store)
        try:
            files = write_manifest(selection.manifest_table(), staging)
            latest = latest_version(session, spec.name)
            if (
                latest
                and latest.spec_hash == digest
                and latest.manifest_sha256 == files.ipc_sha256
                # a near-duplicate dropped since is a new version, so the record says which one it lost to
                and latest.near_duplicates == selection.near_duplicates
            ):
                log.info("dataset %s: unchanged since %s", spec.name, latest.ref)
                warnings = [*latest.warnings, *_restore_damaged(session, store, latest, files)]
                return replace(latest, created=False, counts=selection.counts, warnings=warnings)
            version = next_version(session, spec.name)
            key = f"{MANIFESTS}/{spec.name}/{version}"
            ipc_uri, parquet_uri = _publish(store, staging, key)
            result = _record(session, spec, digest, version, files, ipc_uri, parquet_uri, selection, excluded)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    log.info(
        "dataset %s: built %s with %d rows (episodes per split %s)",
        spec.name,
        result.ref,
        result.row_count,
        result.split_episodes,
    )
    for warning in result.warnings:  # the result carries them: its callers say them to their users
        log.info("dataset %s: %s", result.ref, warning)
    return result


def _restore_damaged(
    session: Session, store: Store, latest: DatasetVersion, files: ManifestFiles
) -> list[str]:
    """Check the stored manifest files of ``latest``, which a build found identical to what it staged
    (``files``), and put back each one that is missing or changed from the staged copy, when that copy has
    the recorded sha256 (so the version's record stays true). Returns one line per file it found damaged:
    a version kept as unchanged must not hide that training could not read it."""
    staged = {
        latest.manifest_uri: (files.ipc_path, files.ipc_sha256),
        latest.parquet_uri: (files.parquet_path, files.parquet_sha256),
    }
    recorded = {
        uri: StoredObject("manifest", uri, sha256, size)
        for uri, sha256, size in session.execute(
            select(Manifest.uri, Manifest.sha256, Manifest.size_bytes).where(Manifest.uri.in_(staged))
        )
    }
    lines = []
    for found in store.scrub(recorded.values()):
        damage = f"manifest file {found.uri} was {_DAMAGE.get(found.problem, found.problem)} ({found.detail})"
        path, sha256 = staged[found.uri]
        key = store.key_of(found.uri)
        if sha256 != found.sha256 or key is None:
            why = "this build's copy differs" if sha256 != found.sha256 else "it lies outside this store"
            lines.append(f"{damage}; not restored ({why}); `sluice scrub` lists every damaged object")
            continue
        _put_back(store, path, key)
        after = next(store.scrub([recorded[found.uri]]), None)
        if after is not None:
            lines.append(f"{damage}; restoring it failed: {after.problem} ({after.detail})")
            continue
        lines.append(f"{damage}; restored from this build's identical copy")
    for line in lines:
        log.info("dataset %s: %s", latest.ref, line)
    return lines


def _put_back(store: Store, staged: Path, key: str) -> None:
    """Write ``staged`` at ``key``, replacing what is there in one step (a reader sees old or new)."""
    final = store.path(key)
    try:
        if store.local:  # the manifest writer's own temporary name, fsync and rename
            Path(final).parent.mkdir(parents=True, exist_ok=True)
            publish_file(Path(final), lambda tmp: shutil.copyfile(staged, tmp))
        else:  # an object store's put replaces the object whole
            store.fs.put_file(str(staged), final)
    except OSError as exc:
        raise StoreError(f"cannot restore the manifest file {store.url(key)}: {exc}") from exc


def _without(
    selection: Selection, exclude: Mapping[int, list[str]]
) -> tuple[Selection, list[dict[str, Any]]]:
    """``selection`` less the episodes of ``exclude``, and which of them it held, with why."""
    if not exclude:
        return selection, []
    column = selection.table.column(EPISODE_ID_INT)
    hit = pc.is_in(column, value_set=pa.array(sorted(exclude), pa.int64()))
    left = sorted({int(e) for e in selection.table.filter(hit).column(EPISODE_ID_INT).to_pylist()})
    table = selection.table.filter(pc.invert(hit))
    counts = {**selection.counts, "excluded": len(left), "rows": table.num_rows}
    return Selection(table, counts, selection.near_duplicates), [
        {"episode_id": e, "reasons": list(exclude[e])} for e in left
    ]


def _lock(session: Session, name: str) -> None:
    key = zlib.crc32(name.encode()) - 2**31  # into int4's range
    session.execute(select(func.pg_advisory_xact_lock(DATASET_LOCK_NAMESPACE, key)))


def _staging_dir(store: Store) -> Path:
    # On a local store, stage inside it so that publishing is a rename on one filesystem.
    if store.local:
        path = Path(store.path(f"{TMP}/manifest-{uuid.uuid4().hex}"))
        path.mkdir(parents=True)
        return path
    return Path(tempfile.mkdtemp(prefix="sluice-manifest-"))


def _publish(store: Store, staging: Path, key: str) -> tuple[str, str]:
    """Move the staged files to ``key``; returns the IPC and Parquet URIs.

    The version is not recorded yet and this builder holds the dataset's lock, so anything already at
    ``key`` is the leftover of a build that published but failed to record: it is replaced.
    """
    final = store.path(key)
    try:
        if store.local:
            target = Path(final)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                log.warning("replacing unrecorded leftover manifest folder %s", target)
                shutil.rmtree(target)
            os.rename(staging, target)
            fsync_path(target.parent)
        else:
            if store.fs.exists(final):
                log.warning("replacing unrecorded leftover manifest folder %s", final)
                store.fs.rm(final, recursive=True)
            for name in (IPC_FILE_NAME, PARQUET_FILE_NAME, SUMS_FILE_NAME):
                store.fs.put_file(str(staging / name), f"{final}/{name}")
    except OSError as exc:
        raise StoreError(f"cannot publish the manifest to {store.url(key)}: {exc}") from exc
    return store.url(f"{key}/{IPC_FILE_NAME}"), store.url(f"{key}/{PARQUET_FILE_NAME}")


def _record(
    session: Session,
    spec: DatasetSpec,
    digest: str,
    version: str,
    files: ManifestFiles,
    ipc_uri: str,
    parquet_uri: str,
    selection: Selection,
    excluded: list[dict[str, Any]],
) -> DatasetVersion:
    split_rows, split_episodes = selection.split_rows(), selection.split_episodes()
    recorded = spec_record(spec.model_dump(mode="json"), selection.near_duplicates, split_rows)
    if excluded:
        recorded[EXCLUDED_KEY] = excluded
    version_id = create_dataset_version(
        session, name=spec.name, version=version, spec_hash=digest, spec=recorded
    )
    for fmt, uri, sha, size in (
        (ManifestFormat.ARROW_IPC, ipc_uri, files.ipc_sha256, files.ipc_size_bytes),
        (ManifestFormat.PARQUET, parquet_uri, files.parquet_sha256, files.parquet_size_bytes),
    ):
        record_manifest(
            session, dataset_version_id=version_id, format=fmt, uri=uri, sha256=sha, size_bytes=size,
            row_count=files.num_rows,
        )  # fmt: skip
    add_dataset_episodes(session, version_id, _episode_splits(selection))
    _record_lineage(session, ipc_uri, files, digest, selection)
    return DatasetVersion(
        id=version_id,
        name=spec.name,
        version=version,
        spec_hash=digest,
        created_at=None,
        manifest_uri=ipc_uri,
        manifest_sha256=files.ipc_sha256,
        parquet_uri=parquet_uri,
        parquet_sha256=files.parquet_sha256,
        row_count=files.num_rows,
        split_episodes=split_episodes,
        split_rows=split_rows,
        created=True,
        counts=selection.counts,
        near_duplicates=selection.near_duplicates,
        warnings=split_warnings(recorded, split_episodes),
    )


def _episode_splits(selection: Selection) -> Iterator[tuple[int, str]]:
    """(episode id, split) pairs, once per episode (a video's clips are several rows of one episode),
    converted batch by batch instead of all at once."""
    pairs = selection.table.select(["episode_id_int", "split"])
    seen: set[int] = set()
    for batch in pairs.to_batches(max_chunksize=INSERT_CHUNK_ROWS):
        for episode_id, split in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
            if episode_id not in seen:
                seen.add(episode_id)
                yield episode_id, split


def _record_lineage(
    session: Session, ipc_uri: str, files: ManifestFiles, digest: str, selection: Selection
) -> None:
    """The manifest as an artifact made from its episodes' transcoded artifacts and their raw blobs."""
    artifacts = sorted(pc.unique(selection.table.column("transcoded_artifact_id")).to_pylist())
    blobs = sorted(pc.unique(selection.table.column("blob_id")).to_pylist())
    # record_artifact inserts its inputs in one statement, so they go in chunks, one call each: calls with the
    # same URI and sha256 add inputs to the same artifact.
    calls: list[tuple[list[int], list[int]]] = [(chunk, []) for chunk in _chunks(artifacts)]
    calls += [([], chunk) for chunk in _chunks(blobs)]
    for artifact_ids, blob_ids in calls or [([], [])]:
        record_artifact(
            session, kind=ArtifactKind.MANIFEST, uri=ipc_uri, sha256=files.ipc_sha256,
            size_bytes=files.ipc_size_bytes, step=None, config_hash=digest, code_version=code_version(),
            input_artifact_ids=artifact_ids, input_blob_ids=blob_ids,
        )  # fmt: skip


def _chunks(ids: list[int]) -> list[list[int]]:
    return [ids[i : i + INSERT_CHUNK_ROWS] for i in range(0, len(ids), INSERT_CHUNK_ROWS)]
