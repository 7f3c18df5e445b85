"""Catalog writers for what vendors deliver: vendors, blobs, source files, calibrations, episodes, streams.

Every write is an idempotent upsert keyed on a unique constraint, so Airflow's and Ray's at-least-once
retries never duplicate a row. Functions take an open :class:`~sqlalchemy.orm.Session` and never commit:
the caller owns the transaction (see :func:`pipeline.catalog.engine.session_scope`).

Write-once rows (blobs, a vendor path's versions, an episode's input) are inserted with ``ON CONFLICT DO
NOTHING`` and then read back; if the recorded row differs from what is offered,
:class:`~pipeline.catalog.errors.CatalogConflictError` is raised instead of overwriting it. An episode's
state changes only through the catalog's ``sluice_set_episode_state()``, which keeps its history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import BigInteger, Text, and_, cast, func, literal, not_, or_, select, update
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from pipeline.catalog import _values as v
from pipeline.catalog.errors import (
    CatalogConflictError,
    CatalogMissingError,
    CatalogValueError,
    HistoryRewriteError,
)
from pipeline.catalog.models import (
    Blob,
    Calibration,
    Episode,
    PassedOverFile,
    SourceFile,
    Stream,
    Vendor,
    table_of,
)
from pipeline.enums import FileState, PassOverReason, ReasonCode, SourceKind, StepName, StreamRole


class SourceFileRef(NamedTuple):
    id: int
    created: bool
    version: int = 1


class EpisodeRef(NamedTuple):
    id: int
    created: bool


@dataclass(frozen=True)
class StreamStats:
    """What ingest measured on one topic of one episode (log times in ns, skew = log time - stamp)."""

    topic: str
    role: StreamRole
    message_count: int
    encoding: str | None = None
    schema_name: str | None = None
    schema_hash: str | None = None
    first_time_ns: int | None = None
    last_time_ns: int | None = None
    rate_hz: float | None = None
    gap_rate: float | None = None
    backward_steps: int = 0
    duplicate_timestamps: int = 0
    max_jump_ns: int | None = None
    skew_median_ns: int | None = None
    skew_p99_ns: int | None = None
    skew_max_ns: int | None = None


#: Looks at a path's versions before giving up: each try loses only to another writer's new version.
_VERSION_TRIES = 8
#: First key of the per-blob advisory locks (``pg_advisory_xact_lock(int4, int4)``); any fixed int4.
BLOB_LOCK_NAMESPACE = 0x5B10B
_INT4_MAX = 2**31 - 1

#: Episode columns that later readers may fill in (NULL until known).
EPISODE_METADATA = (
    "robot_id",
    "session_id",
    "episode_key",
    "task",
    "start_time_ns",
    "end_time_ns",
    "calibration_id",
    "content_fingerprint",
)


def upsert_vendor(
    session: Session, *, name: str, kind: SourceKind | str, config_hash: str, config: Mapping[str, Any]
) -> int:
    """Record a vendor and its current config; returns the vendor id."""
    values = {
        "name": v.nonempty(name, "vendor name"),
        "kind": v.member(SourceKind, kind, "source kind").value,
        "config_hash": v.nonempty(config_hash, "config hash"),
        "config": dict(config),
    }
    recorded = session.execute(
        select(Vendor.id).where(
            Vendor.name == name, Vendor.config_hash == config_hash, Vendor.kind == values["kind"]
        )
    ).scalar_one_or_none()
    if recorded is not None:
        # Unchanged: return without an upsert, which would lock the vendor row until commit and so
        # serialise every concurrent transaction that registers a file of this vendor.
        return recorded
    ins = insert(table_of(Vendor)).values(values)
    changed = or_(Vendor.config_hash != ins.excluded.config_hash, Vendor.kind != ins.excluded.kind)
    stmt = ins.on_conflict_do_update(
        index_elements=[Vendor.name],
        set_={
            "kind": ins.excluded.kind,
            "config_hash": ins.excluded.config_hash,
            "config": ins.excluded.config,
            "updated_at": func.now(),
        },
        # Re-registering an unchanged config writes nothing (no dead row per DAG parse).
        where=changed,
    ).returning(Vendor.id)
    vendor_id = session.execute(stmt).scalar_one_or_none()
    if vendor_id is None:
        vendor_id = session.execute(select(Vendor.id).where(Vendor.name == name)).scalar_one()
    return vendor_id


def register_blob(
    session: Session, *, sha256: str, size_bytes: int, raw_uri: str, verified_at: datetime | None = None
) -> int:
    """Record a raw object once (write-once: never updated); returns the blob id.

    Register only after the object is in the raw store and its hash verified, passing ``verified_at``:
    the ingest role may not UPDATE blobs, so the row is complete when written.
    """
    values = {
        "sha256": v.sha256_hex(sha256),
        "size_bytes": v.nonnegative(size_bytes, "size_bytes"),
        "raw_uri": v.nonempty(raw_uri, "raw_uri"),
        "verified_at": verified_at,
    }
    stmt = (
        insert(table_of(Blob))
        .values(values)
        .on_conflict_do_nothing(index_elements=[Blob.sha256])
        .returning(Blob.id)
    )
    blob_id = session.execute(stmt).scalar_one_or_none()
    if blob_id is not None:
        return blob_id
    recorded = session.execute(select(Blob.id, Blob.size_bytes).where(Blob.sha256 == sha256)).one()
    if recorded.size_bytes != size_bytes:
        raise CatalogConflictError("size_bytes of blob", sha256, recorded.size_bytes, size_bytes)
    return recorded.id


def find_blob(session: Session, sha256: str) -> int | None:
    """The id of the blob with this content, if the catalog has it."""
    return session.execute(select(Blob.id).where(Blob.sha256 == sha256)).scalar_one_or_none()


def register_source_file(
    session: Session,
    *,
    vendor_id: int,
    path: str,
    blob_id: int,
    source_state: Mapping[str, Any] | None = None,
) -> SourceFileRef:
    """Record that ``path`` of a vendor holds blob ``blob_id``; ``created`` is True for the first caller.

    A path keeps every content it was seen with: bytes it held before give that row back (its
    ``source_state`` refreshed when one is given), new bytes become its next ``version``. Concurrent
    writers are safe (a lost insert looks again); ingest also holds the vendor's registration lock
    (:data:`pipeline.steps.ingest.VENDOR_LOCK_NAMESPACE`), so its writers never race at all.
    """
    path = v.nonempty(path, "source path")
    state = None if source_state is None else dict(source_state)
    for _ in range(_VERSION_TRIES):
        versions = session.execute(
            select(SourceFile.id, SourceFile.version, SourceFile.blob_id, SourceFile.source_state)
            .where(SourceFile.vendor_id == vendor_id, SourceFile.path == path)
            .order_by(SourceFile.version)
        ).all()
        for row in versions:
            if row.blob_id == blob_id:
                if state is not None and row.source_state != state:
                    session.execute(
                        update(table_of(SourceFile)).where(SourceFile.id == row.id).values(source_state=state)
                    )
                return SourceFileRef(row.id, False, row.version)
        version = versions[-1].version + 1 if versions else 1
        stmt = (
            insert(table_of(SourceFile))
            .values(vendor_id=vendor_id, path=path, version=version, blob_id=blob_id, source_state=state)
            .on_conflict_do_nothing()
            .returning(SourceFile.id)
        )
        source_file_id = session.execute(stmt).scalar_one_or_none()
        if source_file_id is not None:
            return SourceFileRef(source_file_id, True, version)
        # Another writer registered this path meanwhile (the same bytes, or other bytes under this
        # version number): look again.
    raise CatalogConflictError(
        f"a new version of source file (after {_VERSION_TRIES} tries)", path, "taken", blob_id
    )


def record_passed_over(
    session: Session, *, vendor_id: int, path: str, why: PassOverReason | str, detail: str
) -> None:
    """Record (or refresh) that a file under a vendor root was not taken, and why."""
    values = {
        "vendor_id": vendor_id,
        "path": v.nonempty(path, "source path"),
        "why": v.member(PassOverReason, why, "pass-over reason").value,
        "detail": detail,
    }
    ins = insert(table_of(PassedOverFile)).values(values)
    session.execute(
        ins.on_conflict_do_update(
            index_elements=[PassedOverFile.vendor_id, PassedOverFile.path],
            set_={"why": ins.excluded.why, "detail": ins.excluded.detail, "last_seen_at": func.now()},
        )
    )


def upsert_calibration(
    session: Session,
    *,
    vendor_id: int,
    calibration_key: str,
    robot_id: str,
    valid_from_ns: int,
    valid_to_ns: int | None,
    cameras: Mapping[str, Any],
) -> int:
    """Record a vendor's calibration (keyed by the vendor's own id; a re-delivery updates it).

    Windows of one robot may not overlap: an overlap raises :class:`CatalogConflictError` and leaves the
    caller's transaction usable (the write runs in a savepoint).
    """
    if valid_to_ns is not None and valid_to_ns <= valid_from_ns:
        raise CatalogValueError(
            "calibration window", (valid_from_ns, valid_to_ns), "valid_to_ns > valid_from_ns"
        )
    values = {
        "vendor_id": vendor_id,
        "calibration_key": v.nonempty(calibration_key, "calibration key"),
        "robot_id": v.nonempty(robot_id, "robot id"),
        "valid_from_ns": valid_from_ns,
        "valid_to_ns": valid_to_ns,
        "cameras": dict(cameras),
    }
    ins = insert(table_of(Calibration)).values(values)
    new = ins.excluded
    stmt = ins.on_conflict_do_update(
        index_elements=[Calibration.vendor_id, Calibration.calibration_key],
        set_={
            "robot_id": new.robot_id,
            "valid_from_ns": new.valid_from_ns,
            "valid_to_ns": new.valid_to_ns,
            "cameras": new.cameras,
            "updated_at": func.now(),
        },
        where=or_(
            Calibration.robot_id != new.robot_id,
            Calibration.valid_from_ns != new.valid_from_ns,
            Calibration.valid_to_ns.is_distinct_from(new.valid_to_ns),
            Calibration.cameras != new.cameras,
        ),
    ).returning(Calibration.id)
    try:
        with session.begin_nested():
            calibration_id = session.execute(stmt).scalar_one_or_none()
    except IntegrityError as exc:
        if getattr(exc.orig, "pgcode", None) == "23P01":  # exclusion_violation
            raise CatalogConflictError(
                f"calibration window of robot {robot_id!r}",
                calibration_key,
                "an overlapping window of another calibration",
                (valid_from_ns, valid_to_ns),
            ) from exc
        raise
    if calibration_id is None:
        calibration_id = session.execute(
            select(Calibration.id).where(
                Calibration.vendor_id == vendor_id, Calibration.calibration_key == calibration_key
            )
        ).scalar_one()
    return calibration_id


def find_calibration(session: Session, *, vendor_id: int, robot_id: str, time_ns: int) -> int | None:
    """The calibration of a robot valid at log time ``time_ns`` (windows are half-open: [from, to))."""
    window = func.int8range(Calibration.valid_from_ns, Calibration.valid_to_ns)
    stmt = select(Calibration.id).where(
        Calibration.vendor_id == vendor_id,
        Calibration.robot_id == robot_id,
        window.op("@>")(cast(literal(time_ns), BigInteger)),
    )
    return session.execute(stmt).scalar_one_or_none()


def ensure_episode(
    session: Session,
    *,
    vendor_id: int,
    source_file_id: int,
    blob_id: int,
    kind: SourceKind | str,
    **metadata: Any,
) -> EpisodeRef:
    """The episode of an input (one per source file), created ``pending`` on first call.

    ``metadata`` may give any of :data:`EPISODE_METADATA`; given values are written on every call (later
    readers fill in what earlier ones could not know), omitted or None ones are left as recorded.
    """
    values = {
        "vendor_id": vendor_id,
        "source_file_id": source_file_id,
        "blob_id": blob_id,
        "kind": v.member(SourceKind, kind, "source kind").value,
    }
    fields = _episode_metadata(metadata)
    stmt = (
        insert(table_of(Episode))
        .values({**values, **fields})
        .on_conflict_do_nothing(index_elements=[Episode.source_file_id])
        .returning(Episode.id)
    )
    episode_id = session.execute(stmt).scalar_one_or_none()
    if episode_id is not None:
        return EpisodeRef(episode_id, True)
    recorded = session.execute(
        select(Episode.id, Episode.vendor_id, Episode.blob_id, Episode.kind).where(
            Episode.source_file_id == source_file_id
        )
    ).one()
    for column in ("vendor_id", "blob_id", "kind"):
        if getattr(recorded, column) != values[column]:
            raise CatalogConflictError(
                f"{column} of the episode of source file",
                source_file_id,
                getattr(recorded, column),
                values[column],
            )
    if fields:
        set_episode_metadata(session, recorded.id, **fields)
    return EpisodeRef(recorded.id, False)


def set_episode_metadata(session: Session, episode_id: int, **metadata: Any) -> None:
    """Write the given :data:`EPISODE_METADATA` fields of an episode (None values are ignored)."""
    fields = _episode_metadata(metadata)
    if not fields:
        return
    stmt = update(table_of(Episode)).where(Episode.id == episode_id).values(**fields, updated_at=func.now())
    if session.execute(stmt.returning(Episode.id)).scalar_one_or_none() is None:
        raise CatalogMissingError("episode", episode_id)


def set_episode_state(
    session: Session,
    episode_id: int,
    state: FileState | str,
    *,
    reasons: Iterable[ReasonCode | str] = (),
    detail: str | None = None,
    duplicate_of_id: int | None = None,
    merge_reasons: bool = False,
    step: StepName | str | None = None,
    config_hash: str | None = None,
) -> list[str]:
    """Set an episode's state and reasons (a sorted set); returns the reasons stored.

    ``merge_reasons`` keeps the reasons already recorded (the post gate adds to the pre gate's). A
    ``duplicate`` must name the episode it duplicates. The change goes through the catalog's
    ``sluice_set_episode_state()`` (the only way the ingest role may change a state): it takes the row
    lock (two gates merging at once keep each other's reasons), refuses to leave ``duplicate`` or to go
    back to ``pending`` (:class:`CatalogConflictError`), and appends the change, with ``step`` and
    ``config_hash``, to ``episode_state_changes``.
    """
    new_state = v.member(FileState, state, "file state")
    new_reasons = v.members(ReasonCode, reasons, "reason code")
    if new_state is FileState.DUPLICATE and duplicate_of_id is None:
        raise CatalogValueError(
            "duplicate_of_id", None, f"an episode id when the state is {new_state.value!r}"
        )
    call = func.sluice_set_episode_state(
        literal(episode_id, BigInteger),
        new_state.value,
        cast(new_reasons, ARRAY(Text)),
        cast(detail, Text),
        cast(duplicate_of_id, BigInteger),
        merge_reasons,
        cast(v.optional_member(StepName, step, "step"), Text),
        cast(config_hash, Text),
    )
    try:
        with session.begin_nested():
            stored = session.execute(select(call)).scalar_one()
    except DBAPIError as exc:
        code = getattr(exc.orig, "pgcode", None)
        if code == "P0002":  # no_data_found
            raise CatalogMissingError("episode", episode_id) from exc
        if code == "23000":  # integrity_constraint_violation: a transition the catalog refuses
            raise HistoryRewriteError("state of episode", episode_id, _refusal(exc)) from exc
        raise
    return list(stored)


def _refusal(exc: DBAPIError) -> str:
    """The message Postgres raised (without the SQL that SQLAlchemy adds)."""
    diag = getattr(exc.orig, "diag", None)
    return str(getattr(diag, "message_primary", None) or exc.orig)


def claim_original(session: Session, *, blob_id: int, episode_id: int) -> int | None:
    """The episode this one duplicates, or None if it is the original.

    The original is the first episode with the same content that is not itself a duplicate: of the same
    vendor, whatever its state (a second copy of a file gets its verdict from the first); of another vendor,
    only one already accepted (the same footage bought twice is trained on once, but bytes another vendor's
    contract quarantined, or has not judged yet, are judged under this vendor's own). Files of an ad-hoc
    ingest (:data:`~pipeline.config.models.AD_HOC_PREFIX`) are an exploration: they never make a configured
    vendor's file a duplicate.

    Takes a transaction-scoped advisory lock on the blob so that two workers ingesting the same content
    under two names decide one after the other: call it and then :func:`set_episode_state` in the same
    transaction, after the episode row exists.
    """
    from pipeline.config.models import AD_HOC_PREFIX

    session.execute(select(func.pg_advisory_xact_lock(BLOB_LOCK_NAMESPACE, blob_id % _INT4_MAX)))
    vendor_id, vendor_name = session.execute(
        select(Episode.vendor_id, Vendor.name)
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .where(Episode.id == episode_id)
    ).one()
    judged_good = Episode.state.in_([FileState.ACCEPTED.value, FileState.ACCEPTED_WITH_FLAGS.value])
    other_vendor = and_(Episode.vendor_id != vendor_id, judged_good)
    if not vendor_name.startswith(AD_HOC_PREFIX):
        other_vendor = and_(other_vendor, not_(Vendor.name.startswith(AD_HOC_PREFIX, autoescape=True)))
    stmt = (
        select(func.min(Episode.id))
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .where(
            Episode.blob_id == blob_id,
            Episode.id != episode_id,
            Episode.state != FileState.DUPLICATE.value,
            or_(Episode.vendor_id == vendor_id, other_vendor),
        )
    )
    return session.execute(stmt).scalar_one()


def record_streams(session: Session, episode_id: int, streams: Iterable[StreamStats]) -> int:
    """Upsert the per-topic statistics of an episode (a re-read overwrites them); returns rows written."""
    rows = []
    for stream in streams:
        row = asdict(stream)
        row["role"] = v.member(StreamRole, stream.role, "stream role").value
        v.nonnegative(stream.message_count, f"message_count of {stream.topic}")
        rows.append({"episode_id": episode_id, **row})
    if not rows:
        return 0
    ins = insert(table_of(Stream)).values(rows)
    stats = [c for c in rows[0] if c not in ("episode_id", "topic")]
    stmt = ins.on_conflict_do_update(
        index_elements=[Stream.episode_id, Stream.topic], set_={c: ins.excluded[c] for c in stats}
    )
    session.execute(stmt)
    return len(rows)


def _episode_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(metadata) - set(EPISODE_METADATA)
    if unknown:
        raise CatalogValueError("episode field", sorted(unknown), ", ".join(EPISODE_METADATA))
    return {k: val for k, val in metadata.items() if val is not None}
