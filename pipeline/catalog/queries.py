"""Read-side queries the CLI and the UI share (the writers live in sources/runs/outputs)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from pipeline.catalog.models import Artifact, Blob, CheckResult, Episode, Manifest, SourceFile, Vendor
from pipeline.enums import ArtifactKind, CheckStatus, FileState, ManifestFormat
from pipeline.errors import UnknownChoiceError
from pipeline.store import Store, StoredObject

ARTIFACT_KINDS = frozenset(k.value for k in ArtifactKind)


def _manifest_kind(manifest_format: str) -> str:
    """The kind :func:`stored_objects` gives a manifest file: ``manifest_`` and its format."""
    return f"manifest_{manifest_format}"


#: The kinds :func:`stored_objects` gives its objects: raw blobs, artifacts, and manifest files by format.
STORED_OBJECT_KINDS = frozenset({"raw", *ARTIFACT_KINDS, *(_manifest_kind(f.value) for f in ManifestFormat)})


def require_vendor(session: Session, name: str) -> None:
    """Raise :class:`~pipeline.errors.UnknownChoiceError` naming the recorded vendors unless ``name`` is one:
    a filter on a misspelt vendor must not answer with an empty, successful listing."""
    known = set(session.execute(select(Vendor.name)).scalars())
    if name not in known:
        raise UnknownChoiceError("vendor", name, known or ["(no vendor recorded yet)"])


def list_files(
    session: Session, *, state: FileState | str | None = None, vendor: str | None = None
) -> list[dict[str, Any]]:
    """One record per source file: path, vendor, sha256, state, reasons, duplicate_of (its path),
    duplicate_of_vendor and duplicate_of_episode (the original's), detail.

    An unknown ``state`` or ``vendor`` raises :class:`~pipeline.errors.UnknownChoiceError`.
    """
    if state is not None and state not in {s.value for s in FileState}:
        raise UnknownChoiceError("file state", state, [s.value for s in FileState])
    if vendor is not None:
        require_vendor(session, vendor)
    original = aliased(Episode)
    original_file = aliased(SourceFile)
    original_vendor = aliased(Vendor)
    stmt = (
        select(
            Episode.id.label("episode_id"),
            Vendor.name.label("vendor"),
            SourceFile.path,
            Blob.sha256,
            Blob.size_bytes,
            Episode.kind,
            Episode.state,
            Episode.reasons,
            Episode.detail,
            original_file.path.label("duplicate_of"),
            original_vendor.name.label("duplicate_of_vendor"),
            original.id.label("duplicate_of_episode"),
        )
        .join(SourceFile, SourceFile.id == Episode.source_file_id)
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .join(Blob, Blob.id == Episode.blob_id)
        .outerjoin(original, original.id == Episode.duplicate_of_id)
        .outerjoin(original_file, original_file.id == original.source_file_id)
        .outerjoin(original_vendor, original_vendor.id == original.vendor_id)
        .order_by(Vendor.name, SourceFile.path)
    )
    if state is not None:
        stmt = stmt.where(Episode.state == FileState(state).value)
    if vendor is not None:
        stmt = stmt.where(Vendor.name == vendor)
    return [dict(row._mapping) for row in session.execute(stmt)]


def failed_checks(session: Session, episode_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The checks that did not pass, per episode (for explaining quarantines)."""
    if not episode_ids:
        return {}
    rows = session.execute(
        select(
            CheckResult.episode_id,
            CheckResult.gate,
            CheckResult.check_name,
            CheckResult.status,
            CheckResult.reason,
            CheckResult.detail,
        )
        .where(CheckResult.episode_id.in_(episode_ids), CheckResult.status != CheckStatus.PASSED.value)
        .order_by(CheckResult.episode_id, CheckResult.id)
    ).all()
    out: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row.episode_id, []).append(
            {
                "gate": row.gate,
                "check": row.check_name,
                "status": row.status,
                "reason": row.reason,
                "detail": row.detail,
            }
        )
    return out


def all_blobs(session: Session) -> list[tuple[str, int]]:
    """(sha256, size_bytes) of every landed raw object."""
    return [(r.sha256, r.size_bytes) for r in session.execute(select(Blob.sha256, Blob.size_bytes))]


def stored_objects(session: Session, store: Store) -> list[StoredObject]:
    """Every object the catalog records a sha256 for, once each: raw blobs (at their place in ``store``),
    derived artifacts of every kind, and both files of every manifest."""
    objects = [
        StoredObject("raw", store.url(store.raw_key(sha256)), sha256, size)
        for sha256, size in all_blobs(session)
    ]
    artifacts = select(Artifact.kind, Artifact.uri, Artifact.sha256, Artifact.size_bytes).order_by(
        Artifact.id
    )
    manifests = select(Manifest.format, Manifest.uri, Manifest.sha256, Manifest.size_bytes).order_by(
        Manifest.id
    )
    seen = {o.uri for o in objects}
    for kind, uri, sha256, size in [*session.execute(artifacts), *session.execute(manifests)]:
        if uri not in seen:  # a manifest's IPC file is also its lineage artifact
            seen.add(uri)
            objects.append(
                StoredObject(kind if kind in ARTIFACT_KINDS else _manifest_kind(kind), uri, sha256, size)
            )
    return objects
