"""Lineage: from anything the pipeline made back to the raw file, the steps, config hashes and code versions.

Ids are written ``<kind>:<value>`` (:mod:`pipeline.ui.refs` has the table): ``episode:12``,
``blob:<sha256>``, ``manifest:pick_place@v3:1041``, ...

:func:`trace` returns a :class:`Lineage`: the chain from the object back to its raw file (each link with
its config hash and code version), the episode's step runs under every config, the episode's artifacts, the
dataset versions that hold it, and the aliases of its raw bytes. Everything is read from the catalog, except
a manifest row, which is read from the manifest file itself (one record batch of it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline.catalog.errors import CatalogMissingError
from pipeline.catalog.models import (
    Artifact,
    ArtifactInput,
    Blob,
    DatasetVersion,
    DatasetVersionEpisode,
    Episode,
    Manifest,
    PipelineRun,
    Shard,
    SourceFile,
    StepRun,
    Vendor,
)
from pipeline.enums import ArtifactKind, ManifestFormat, StepName
from pipeline.ui.refs import (
    REF_SYNTAX,
    VERSIONED,
    LineageNotFoundError,
    LineageRefError,
    Ref,
    parse_ref,
    read_manifest_row,
)

__all__ = [
    "REF_SYNTAX",
    "Lineage",
    "LineageNotFoundError",
    "LineageRefError",
    "Node",
    "Ref",
    "StepRecord",
    "parse_ref",
    "read_manifest_row",
    "trace",
]

#: Inputs and outputs listed per artifact; the counts are always complete.
LISTED_LINKS = 20
#: Links followed up a chain at most (a chain is a few steps long; a cycle would be a catalog bug).
MAX_CHAIN = 32


@dataclass(frozen=True)
class Node:
    """One link of a chain: what it is, the id to follow it by, and its recorded facts."""

    kind: str  # manifest_row, manifest, shard, artifact, episode, blob
    ref: str
    label: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class StepRecord:
    step: str
    status: str
    config_hash: str
    attempt: int
    reason: str | None
    detail: str | None
    pipeline_run_id: int | None
    dag_id: str | None
    run_id: str | None
    started_at: datetime | None
    ended_at: datetime | None


@dataclass
class Lineage:
    """What :func:`trace` found for one id."""

    ref: str
    chain: list[Node] = field(default_factory=list)  # from the object asked about back to the raw file
    episode: dict[str, Any] | None = None
    raw: dict[str, Any] | None = None  # the blob and every vendor path that delivered it
    steps: list[StepRecord] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)  # all of the episode's artifacts
    datasets: list[dict[str, Any]] = field(default_factory=list)  # dataset versions holding the episode
    inputs: list[Node] = field(default_factory=list)  # what the first artifact was made from, when many
    outputs: list[Node] = field(default_factory=list)  # what was made from the object
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def trace(session: Session, ref: str | Ref, *, storage_options: dict[str, Any] | None = None) -> Lineage:
    """The lineage of the object ``ref`` names (:class:`LineageNotFoundError` when nothing matches)."""
    parsed = ref if isinstance(ref, Ref) else parse_ref(ref)
    lineage = Lineage(ref=str(parsed))
    episode_id: int | None = None
    blob_id: int | None = None
    if parsed.kind == "manifest":
        artifact_id, episode_id = _from_manifest(session, parsed, lineage, storage_options)
        if artifact_id is not None:
            episode_id = _walk_artifacts(session, artifact_id, lineage) or episode_id
    elif parsed.kind == "shard":
        artifact_id = _from_shard(session, parsed, lineage)
        episode_id = _walk_artifacts(session, artifact_id, lineage)
    elif parsed.kind == "artifact":
        episode_id = _walk_artifacts(session, _artifact_id(session, parsed), lineage)
    elif parsed.kind == "episode":
        episode_id = int(parsed.value)
    elif parsed.kind == "file":
        episode_id = _episode_of_file(session, parsed)
    else:
        blob_id = session.execute(select(Blob.id).where(Blob.sha256 == parsed.value)).scalar_one_or_none()
        if blob_id is None:
            raise LineageNotFoundError(str(parsed))
    if episode_id is not None:
        blob_id = _add_episode(session, episode_id, lineage)
    if blob_id is not None:
        _add_blob(session, blob_id, lineage, with_outputs=parsed.kind == "blob")
    return lineage


# --- starting points ---------------------------------------------------------------------------------------


def _artifact_id(session: Session, ref: Ref) -> int:
    column = Artifact.id if ref.value.isdigit() else Artifact.uri
    value: int | str = int(ref.value) if ref.value.isdigit() else ref.value
    found = session.execute(select(Artifact.id).where(column == value)).scalar_one_or_none()
    if found is None:
        raise LineageNotFoundError(str(ref))
    return found


def _episode_of_file(session: Session, ref: Ref) -> int:
    vendor, _, path = ref.value.partition("/")
    found = session.execute(
        select(Episode.id)
        .join(SourceFile, SourceFile.id == Episode.source_file_id)
        .join(Vendor, Vendor.id == SourceFile.vendor_id)
        .where(Vendor.name == vendor, SourceFile.path == path)
    ).scalar_one_or_none()
    if found is None:
        raise LineageNotFoundError(str(ref), f"no file {path!r} of vendor {vendor!r}")
    return found


def _dataset_version_id(session: Session, ref: Ref, name: str, version: str) -> int:
    found = session.execute(
        select(DatasetVersion.id).where(DatasetVersion.name == name, DatasetVersion.version == version)
    ).scalar_one_or_none()
    if found is None:
        raise LineageNotFoundError(str(ref), f"no dataset version {name}@{version}")
    return found


def _from_manifest(
    session: Session, ref: Ref, lineage: Lineage, storage_options: dict[str, Any] | None
) -> tuple[int | None, int | None]:
    """Add the manifest (and its row) to the chain; returns the artifact to follow and the row's episode."""
    name_version, _, row_text = ref.value.partition(":")
    match = VERSIONED.fullmatch(name_version)
    assert match is not None  # parse_ref checked it
    name, version = match["name"], match["version"]
    version_id = _dataset_version_id(session, ref, name, version)
    manifest = session.execute(
        select(Manifest).where(
            Manifest.dataset_version_id == version_id, Manifest.format == ManifestFormat.ARROW_IPC.value
        )
    ).scalar_one_or_none()
    if manifest is None:
        raise LineageNotFoundError(str(ref), f"{name}@{version} has no Arrow IPC manifest recorded")
    manifest_artifact = session.execute(
        select(Artifact).where(Artifact.uri == manifest.uri)
    ).scalar_one_or_none()
    manifest_node = Node(
        "manifest",
        f"manifest:{name}@{version}",
        f"manifest of {name}@{version}",
        {
            "uri": manifest.uri,
            "sha256": manifest.sha256,
            "rows": manifest.row_count,
            "size_bytes": manifest.size_bytes,
            "spec_hash (config hash)": manifest_artifact.config_hash if manifest_artifact else None,
            "code_version": manifest_artifact.code_version if manifest_artifact else None,
            "created_at": manifest.created_at,
        },
    )
    if not row_text:
        lineage.chain.append(manifest_node)
        if manifest_artifact is not None:
            lineage.inputs = _inputs(session, manifest_artifact.id)
        return None, None
    row_index = int(row_text)
    if row_index >= manifest.row_count:
        raise LineageNotFoundError(
            str(ref), f"{name}@{version} has {manifest.row_count} rows (0 to {manifest.row_count - 1})"
        )
    row = read_manifest_row(manifest.uri, row_index, storage_options=storage_options)
    lineage.chain.append(
        Node("manifest_row", str(ref), f"row {row_index} of {name}@{version}", {"row": row_index, **row})
    )
    lineage.chain.append(manifest_node)
    transcoded = session.execute(
        select(Artifact.id).where(Artifact.uri == str(row.get("uri")))
    ).scalar_one_or_none()
    episode_id = int(row["episode_id"]) if str(row.get("episode_id", "")).isdigit() else None
    if transcoded is None:
        lineage.notes.append(f"the row's uri {row.get('uri')!r} is not a recorded artifact")
    lineage.notes.extend(_row_consistency(session, row, episode_id))
    return transcoded, episode_id


def _row_consistency(session: Session, row: dict[str, Any], episode_id: int | None) -> list[str]:
    """Notes where the manifest row and the catalog disagree (a row must name its raw source exactly)."""
    if episode_id is None:
        return [f"the row's episode_id {row.get('episode_id')!r} is not a catalog episode id"]
    sha = session.execute(
        select(Blob.sha256).join(Episode, Episode.blob_id == Blob.id).where(Episode.id == episode_id)
    ).scalar_one_or_none()
    if sha is None:
        return [f"episode {episode_id} named by the row is not in the catalog"]
    if row.get("source_sha256") != sha:
        return [f"the row's source_sha256 {row.get('source_sha256')} differs from the catalog's {sha}"]
    return []


def _from_shard(session: Session, ref: Ref, lineage: Lineage) -> int:
    stmt = select(Shard, DatasetVersion.name, DatasetVersion.version).outerjoin(
        DatasetVersion, DatasetVersion.id == Shard.dataset_version_id
    )
    if ref.value.isdigit():
        stmt = stmt.where(Shard.id == int(ref.value))
    else:
        name_version, split, index = ref.value.split(":")
        match = VERSIONED.fullmatch(name_version)
        assert match is not None
        version_id = _dataset_version_id(session, ref, match["name"], match["version"])
        stmt = stmt.where(
            Shard.dataset_version_id == version_id, Shard.split == split, Shard.shard_index == int(index)
        )
    found = session.execute(stmt).one_or_none()
    if found is None:
        raise LineageNotFoundError(str(ref))
    shard, name, version = found
    lineage.chain.append(
        Node(
            "shard",
            f"shard:{shard.id}",
            f"shard {shard.id}"
            + (f" of {name}@{version} ({shard.split} #{shard.shard_index})" if name else ""),
            {
                "dataset_version": f"{name}@{version}" if name else None,
                "split": shard.split,
                "shard_index": shard.shard_index,
                "episodes": shard.n_episodes,
                "samples": shard.n_samples,
                "created_at": shard.created_at,
            },
        )
    )
    return shard.artifact_id


# --- walking up --------------------------------------------------------------------------------------------


def _artifact_node(artifact: Artifact, n_inputs: int) -> Node:
    return Node(
        "artifact",
        f"artifact:{artifact.id}",
        f"{artifact.kind} #{artifact.id}" + (f" (step {artifact.step})" if artifact.step else ""),
        {
            "kind": artifact.kind,
            "uri": artifact.uri,
            "sha256": artifact.sha256,
            "size_bytes": artifact.size_bytes,
            "step": artifact.step,
            "config_hash": artifact.config_hash,
            "code_version": artifact.code_version,
            "episode_id": artifact.episode_id,
            "inputs": n_inputs,
            "created_at": artifact.created_at,
        },
    )


def _walk_artifacts(session: Session, artifact_id: int, lineage: Lineage) -> int | None:
    """Follow an artifact up through single-input artifacts; returns the episode the chain reaches."""
    seen: set[int] = set()
    current: int | None = artifact_id
    episode_id: int | None = None
    while current is not None and current not in seen and len(seen) < MAX_CHAIN:
        seen.add(current)
        artifact = session.get(Artifact, current)
        if artifact is None:
            raise CatalogMissingError("artifact", current)
        inputs = session.execute(
            select(ArtifactInput.input_artifact_id, ArtifactInput.input_blob_id).where(
                ArtifactInput.artifact_id == current
            )
        ).all()
        lineage.chain.append(_artifact_node(artifact, len(inputs)))
        episode_id = episode_id or artifact.episode_id
        parents = [i.input_artifact_id for i in inputs if i.input_artifact_id is not None]
        if len(parents) == 1:
            current = parents[0]
            continue
        if len(inputs) > 1 and not lineage.inputs:
            # A manifest or a shard made of many episodes: list them, the chain cannot pick one.
            lineage.inputs = _inputs(session, artifact.id)
        current = None
    return episode_id


def _inputs(session: Session, artifact_id: int) -> list[Node]:
    rows = session.execute(
        select(ArtifactInput.input_artifact_id, ArtifactInput.input_blob_id)
        .where(ArtifactInput.artifact_id == artifact_id)
        .order_by(ArtifactInput.id)
        .limit(LISTED_LINKS)
    ).all()
    nodes = []
    for parent_id, blob_id in rows:
        if parent_id is not None:
            parent = session.get(Artifact, parent_id)
            if parent is not None:
                nodes.append(_artifact_node(parent, 0))
        elif blob_id is not None:
            blob = session.get(Blob, blob_id)
            if blob is not None:
                nodes.append(
                    Node("blob", f"blob:{blob.sha256}", f"raw {blob.sha256[:12]}", {"uri": blob.raw_uri})
                )
    return nodes


def _add_episode(session: Session, episode_id: int, lineage: Lineage) -> int:
    found = session.execute(
        select(Episode, Vendor.name, SourceFile.path)
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .join(SourceFile, SourceFile.id == Episode.source_file_id)
        .where(Episode.id == episode_id)
    ).one_or_none()
    if found is None:
        raise LineageNotFoundError(f"episode:{episode_id}")
    episode, vendor, path = found
    lineage.episode = {
        "id": episode.id,
        "vendor": vendor,
        "path": path,
        "kind": episode.kind,
        "state": episode.state,
        "reasons": list(episode.reasons),
        "detail": episode.detail,
        "robot_id": episode.robot_id,
        "session_id": episode.session_id,
        "task": episode.task,
        "duration_s": episode.duration_s,
        "duplicate_of_id": episode.duplicate_of_id,
    }
    lineage.chain.append(
        Node(
            "episode",
            f"episode:{episode.id}",
            f"episode {episode.id} ({vendor}/{path})",
            {"state": episode.state, "reasons": ", ".join(episode.reasons) or None, "kind": episode.kind},
        )
    )
    order = {s.value: i for i, s in enumerate(StepName)}
    steps = session.execute(
        select(StepRun, PipelineRun.dag_id, PipelineRun.run_id)
        .outerjoin(PipelineRun, PipelineRun.id == StepRun.pipeline_run_id)
        .where(StepRun.episode_id == episode_id)
    ).all()
    lineage.steps = [
        StepRecord(
            step=s.step,
            status=s.status,
            config_hash=s.config_hash,
            attempt=s.attempt,
            reason=s.reason,
            detail=s.detail,
            pipeline_run_id=s.pipeline_run_id,
            dag_id=dag_id,
            run_id=run_id,
            started_at=s.started_at,
            ended_at=s.ended_at,
        )
        for s, dag_id, run_id in sorted(
            steps, key=lambda r: (order.get(r[0].step, 99), r[0].started_at, r[0].id)
        )
    ]
    artifacts = session.execute(
        select(Artifact).where(Artifact.episode_id == episode_id).order_by(Artifact.id)
    ).scalars()
    lineage.artifacts = [_artifact_node(a, 0).fields | {"id": a.id} for a in artifacts]
    versions = session.execute(
        select(DatasetVersion.name, DatasetVersion.version, DatasetVersionEpisode.split)
        .join(DatasetVersionEpisode, DatasetVersionEpisode.dataset_version_id == DatasetVersion.id)
        .where(DatasetVersionEpisode.episode_id == episode_id)
        .order_by(DatasetVersion.name, DatasetVersion.id)
    ).all()
    lineage.datasets = [{"dataset": f"{n}@{v}", "split": s} for n, v, s in versions]
    return episode.blob_id


def _add_blob(session: Session, blob_id: int, lineage: Lineage, *, with_outputs: bool) -> None:
    blob = session.get(Blob, blob_id)
    if blob is None:
        raise CatalogMissingError("blob", blob_id)
    aliases = session.execute(
        select(Vendor.name, SourceFile.path, SourceFile.first_seen_at, Episode.id, Episode.state)
        .join(Vendor, Vendor.id == SourceFile.vendor_id)
        .outerjoin(Episode, Episode.source_file_id == SourceFile.id)
        .where(SourceFile.blob_id == blob_id)
        .order_by(SourceFile.first_seen_at, SourceFile.id)
    ).all()
    lineage.raw = {
        "sha256": blob.sha256,
        "size_bytes": blob.size_bytes,
        "raw_uri": blob.raw_uri,
        "landed_at": blob.landed_at,
        "verified_at": blob.verified_at,
        "aliases": [
            {"vendor": v, "path": p, "first_seen_at": t, "episode_id": e, "state": s}
            for v, p, t, e, s in aliases
        ],
    }
    lineage.chain.append(
        Node(
            "blob",
            f"blob:{blob.sha256}",
            f"raw file {blob.sha256[:12]}…",
            {"sha256": blob.sha256, "raw_uri": blob.raw_uri, "size_bytes": blob.size_bytes},
        )
    )
    if with_outputs:
        made = session.execute(
            select(Artifact)
            .join(ArtifactInput, ArtifactInput.artifact_id == Artifact.id)
            .where(ArtifactInput.input_blob_id == blob_id, Artifact.kind != ArtifactKind.MANIFEST.value)
            .order_by(Artifact.id)
            .limit(LISTED_LINKS)
        ).scalars()
        lineage.outputs = [_artifact_node(a, 0) for a in made]
        if lineage.raw["aliases"] and lineage.episode is None:
            first = lineage.raw["aliases"][0]
            if first["episode_id"] is not None:
                lineage.notes.append(f"follow episode:{first['episode_id']} for its steps and artifacts")
