"""The report's contact sheet: a frame per episode of a run, held-back ones first, each taken where its
check failed when the check names a time (a clock jump, the worst stream's largest gap), else in the middle,
else the last frame that decodes before the damage (:mod:`pipeline.report.frames`); and, per episode, how to
open it in a viewer (Foxglove for robot logs, ``ffplay`` for clips, ``sluice lineage``), as text, since a
self-contained report links nowhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline.catalog.models import Artifact, Blob, CheckResult, Episode, SourceFile, Vendor
from pipeline.enums import ArtifactKind, FileState, Gate, ReasonCode, SourceKind
from pipeline.report.frames import Thumbnail
from pipeline.store import client_errors, first_line

#: Thumbnails per report: every held-back episode of the run up to the first number, then accepted ones up
#: to the second; each costs a GOP's decode and ~7 kB of page.
MAX_SHEET_HELD = 24
MAX_SHEET_ACCEPTED = 12


@dataclass
class SheetEntry:
    episode_id: int
    vendor: str
    path: str
    kind: str
    state: str
    reasons: list[str]
    thumbnail: Thumbnail
    viewer: list[str] = field(default_factory=list)


def contact_sheet(
    session: Session, episode_ids: Iterable[int], *, storage_options: dict[str, Any] | None = None
) -> list[SheetEntry]:
    """A thumbnail per episode among ``episode_ids``: held-back and flagged first (up to
    :data:`MAX_SHEET_HELD`), then accepted ones (up to :data:`MAX_SHEET_ACCEPTED`)."""
    rows = session.execute(
        select(
            Episode.id,
            Episode.kind,
            Episode.state,
            Episode.reasons,
            Episode.start_time_ns,
            Episode.end_time_ns,
            Vendor.name.label("vendor"),
            SourceFile.path,
            Blob.raw_uri,
        )
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .join(SourceFile, SourceFile.id == Episode.source_file_id)
        .join(Blob, Blob.id == Episode.blob_id)
        .where(Episode.id.in_(list(episode_ids)), Episode.state != FileState.DUPLICATE.value)
        .order_by(Episode.id)
    ).all()
    accepted = [r for r in rows if r.state == FileState.ACCEPTED.value][:MAX_SHEET_ACCEPTED]
    held = [r for r in rows if r.state != FileState.ACCEPTED.value][:MAX_SHEET_HELD]
    chosen = [*held, *accepted]
    transcoded = transcoded_uris(session, [r.id for r in chosen])
    probes = _pre_gate(session, [r.id for r in chosen])
    entries = []
    for row in chosen:
        checks = probes.get(row.id, {})
        thumb = _thumbnail(row, checks, transcoded.get(row.id), storage_options)
        entries.append(
            SheetEntry(
                episode_id=row.id,
                vendor=row.vendor,
                path=row.path,
                kind=row.kind,
                state=row.state,
                reasons=list(row.reasons or []),
                thumbnail=thumb,
                viewer=viewer_commands(row.id, row.kind, row.raw_uri, transcoded.get(row.id)),
            )
        )
    return entries


def viewer_commands(episode_id: int, kind: str, raw_uri: str, transcoded_uri: str | None) -> list[str]:
    """How to look at an episode yourself (local paths for a local store, URIs otherwise)."""
    lines = []
    if kind == SourceKind.MCAP.value:
        target = _local(transcoded_uri) if transcoded_uri else _local(raw_uri)
        what = "transcoded episode" if transcoded_uri else "raw log"
        lines.append(f"Foxglove (Open local file…): {target}  [{what}]")
    else:
        lines.append(f"ffplay {_local(raw_uri)}")
    lines.append(f"sluice lineage episode:{episode_id}")
    return lines


def _local(uri: str) -> str:
    return uri.removeprefix("file://")


def transcoded_uris(session: Session, episode_ids: Sequence[int]) -> dict[int, str]:
    rows = session.execute(
        select(Artifact.episode_id, Artifact.uri)
        .where(
            Artifact.episode_id.in_(list(episode_ids)), Artifact.kind == ArtifactKind.TRANSCODED_EPISODE.value
        )
        .order_by(Artifact.episode_id, Artifact.created_at, Artifact.id)
    ).all()
    return {int(r.episode_id): str(r.uri) for r in rows}  # the latest wins


def _pre_gate(session: Session, episode_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Per episode: check name → (status, observed) of its latest pre-gate checks."""
    rows = session.execute(
        select(CheckResult.episode_id, CheckResult.check_name, CheckResult.status, CheckResult.observed)
        .where(CheckResult.episode_id.in_(list(episode_ids)), CheckResult.gate == Gate.PRE.value)
        .order_by(CheckResult.episode_id, CheckResult.checked_at, CheckResult.id)
    ).all()
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        out.setdefault(int(r.episode_id), {})[r.check_name] = (r.status, r.observed or {})
    return out


def failure_point(
    checks: Mapping[str, Any], start_ns: int | None, end_ns: int | None
) -> tuple[int | None, str | None, str | None]:
    """Where to look in a robot log: ``(log time, camera topic, why)`` of a failed check that names a
    time (the largest clock jump, the worst stream's largest gap), else the middle (why None), else
    nothing known (the caller takes the last frame that decodes)."""
    from pipeline.families import camera_family

    probe = checks.get("probe", (None, {}))[1]
    topics = {str(t.get("topic")): t for t in probe.get("topics", []) if isinstance(t, dict)}
    cameras = sorted(t for t, s in topics.items() if camera_family(s.get("schema_name")) is not None)
    camera = cameras[0] if cameras else None
    for name, reason in (
        ("max_clock_jump", ReasonCode.CLOCK_JUMP),
        ("max_gap_rate", ReasonCode.GAP_RATE_HIGH),
    ):
        status, observed = checks.get(name, (None, {}))
        unexpected = observed.get("unexpected") if isinstance(observed, dict) else None
        if status != "failed" or not isinstance(unexpected, dict) or not unexpected:
            continue
        worst = max(unexpected, key=lambda t: _magnitude(unexpected[t]))
        at = topics.get(worst, {}).get("largest_jump_at_ns")
        if isinstance(at, int):
            on = worst if worst in cameras else camera
            return at, on, f"{name} failed ({reason.value} on {worst})"
    if start_ns is not None and end_ns is not None:
        return (start_ns + end_ns) // 2, camera, None
    return None, camera, None


def _magnitude(value: Any) -> float:
    if isinstance(value, list | tuple) and value:
        value = value[-1]
    return float(value) if isinstance(value, int | float) else 0.0


def _thumbnail(
    row: Any, checks: Mapping[str, Any], transcoded_uri: str | None, storage_options: dict[str, Any] | None
) -> Thumbnail:
    import fsspec

    from pipeline.report import frames

    options = storage_options or {}
    try:
        if row.kind == SourceKind.MCAP.value:
            if row.state == FileState.ACCEPTED.value and transcoded_uri:
                return frames.transcoded_frame(transcoded_uri, None, storage_options=options)
            at_ns, camera, why = failure_point(checks, row.start_time_ns, row.end_time_ns)
            with fsspec.open(row.raw_uri, "rb", **options) as handle:
                return frames.raw_log_frame(handle, camera, at_ns=at_ns, start_ns=row.start_time_ns, why=why)
        with fsspec.open(row.raw_uri, "rb", **options) as handle:
            return frames.clip_frame(handle, at_s=None, why=None)
    except (
        client_errors()
    ) as exc:  # a store out of reach (S3 down, no credentials) too: the sheet still renders
        return frames.none(f"the raw file cannot be read: {first_line(exc)}")
