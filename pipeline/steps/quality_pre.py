"""The ``quality_pre`` step: probe each landed input, gate it, and record the one state it ends in.

Robot logs get a full CRC-validated read (:func:`pipeline.mcaplog.read_log`); videos a sandboxed PyAV probe
(:class:`pipeline.videoprobe.VideoProber`, one worker process kept per step worker). The measurements are
stored (streams, episode metadata, the full probe report as JSON in the ``probe`` check result, which for a
video names the decoder version that produced it), then :mod:`pipeline.quality.pregate` runs the Great
Expectations suites and the contract, and every check result and the final state are written in one
transaction. Quarantined inputs stay in the raw store untouched; exact duplicates are not probed again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.enums import CheckStatus, FileState, Gate, ReasonCode, SourceKind, StepName, StreamRole
from pipeline.steps.base import Step, StepResult, WorkItem
from pipeline.steps.ingest import IngestStep, registered_episodes

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from pipeline.config import VendorConfig
    from pipeline.quality.pregate import CheckOutcome
    from pipeline.videoprobe import VideoProber

log = logging.getLogger(__name__)

#: First key of the per-fingerprint advisory lock: two workers gating re-chunked copies of the same
#: messages at once must see each other's fingerprint, so they decide one after the other.
FINGERPRINT_LOCK_NAMESPACE = 0x5F19E
#: First key of the per-vendor calibration lock: two workers loading one vendor's sidecar at once would
#: upsert the same rows in one transaction each, and concurrent speculative inserts under the calibrations'
#: unique key and overlap exclusion constraint can deadlock; they load one after the other instead.
CALIBRATION_LOCK_NAMESPACE = 0x5CA1B
#: The calibration sidecar is read whole; a fleet's calibrations are kilobytes, so 16 MiB means a wrong file.
MAX_SIDECAR_BYTES = 16 << 20
#: Payload fields tried for a hardware stamp when the contract names none.
DEFAULT_STAMP_FIELDS = ("stamp_ns", "timestamp", "header.stamp")


def read_log_options(vendor: VendorConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`pipeline.mcaplog.read_log` for ``vendor``'s robot logs: its limits,
    compressions, contract rates, stamp fields and content probes (tests read a log exactly as the step
    does with them)."""
    from pipeline.families.probe import content_probes
    from pipeline.mcaplog import ReadLimits
    from pipeline.quality.pregate import is_robot_contract

    contract = vendor.topics
    robot = is_robot_contract(vendor)
    named = sorted({t.stamp_field for t in contract.all_topics() if t.stamp_field}) if contract else []
    return {
        "limits": ReadLimits(max_record_bytes=int(vendor.ingest.max_record_bytes)),
        # the config says "none" where the MCAP format writes an empty string
        "allowed_compressions": tuple("" if c == "none" else c for c in contract.compressions)
        if contract
        else ("", "lz4", "zstd"),
        "allowed_encodings": None,  # the gate checks encodings against the contract itself
        "expected_rates_hz": {t.topic: t.rate_hz for t in contract.all_topics()} if contract else {},
        "stamp_fields": tuple(named) or DEFAULT_STAMP_FIELDS,
        "content_digest": robot,  # near-duplicates are a robot-contract finding
        # the pictures and named vectors of the contract's topics, looked into during the same read
        "content_probes": content_probes(contract, decode_every=vendor.quality.pre.decode_every_frames)
        if robot
        else {},
    }


class QualityPreStep(Step):
    """Probe and gate the episodes of a batch."""

    name = StepName.QUALITY_PRE

    @cached_property
    def vendor_id(self) -> int:
        return IngestStep(self.vendor, self.ctx).vendor_id

    @cached_property
    def prober(self) -> VideoProber:
        """The sandboxed video prober of this worker; its process ends with the step (or the interpreter)."""
        from pipeline.quality.pregate import probe_limits
        from pipeline.videoprobe import VideoProber

        prober = VideoProber(probe_limits(self.vendor))
        weakref.finalize(self, prober.close)
        return prober

    def setup(self) -> None:
        from pipeline.quality.pregate import warm_up

        self.load_calibrations()
        warm_up()

    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        """The batch's registered inputs (every version of each path) that are not exact duplicates."""
        paths = [i.source_path or i.key for i in batch_items]
        known = registered_episodes(self.ctx.engine, self.vendor_id, paths)
        out = []
        for path in dict.fromkeys(paths):
            for reg in known.get(path, ()):
                if reg.state != FileState.DUPLICATE.value:
                    out.append(
                        WorkItem(
                            key=reg.alias,
                            episode_id=reg.episode_id,
                            source_path=path,
                            size_bytes=reg.size_bytes,
                        )
                    )
        return out

    # -- calibration ---------------------------------------------------------------------------------------

    def load_calibrations(self) -> int:
        """Register the vendor's calibration sidecar (if it ships one); returns how many entries were taken.

        A missing or unreadable sidecar is logged, not raised: the episodes it would have covered are then
        flagged ``no_calibration`` one by one, which is where a vendor sees the problem.
        """
        import fsspec
        from sqlalchemy import func, select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.errors import CatalogConflictError, CatalogValueError
        from pipeline.catalog.sources import upsert_calibration

        sidecar = self.vendor.calibration.sidecar_path
        if sidecar is None:
            return 0
        url = self.vendor.source_url(self.ctx.settings.project_dir_abs).rstrip("/") + "/" + str(sidecar)
        fs, path = fsspec.core.url_to_fs(url, **dict(self.vendor.source.storage_options))
        if not fs.exists(path):
            log.warning("calibration sidecar %s not found; episodes will be flagged no_calibration", url)
            return 0
        with fs.open(path, "rb") as f:
            raw = f.read(MAX_SIDECAR_BYTES + 1)
        try:
            if len(raw) > MAX_SIDECAR_BYTES:
                raise ValueError(f"larger than {MAX_SIDECAR_BYTES} bytes")
            entries = json.loads(raw)
            if not isinstance(entries, list):
                raise ValueError(f"a JSON {type(entries).__name__}, not a list of calibrations")
        except ValueError as exc:
            log.error(
                "calibration sidecar %s is unusable (%s); episodes will be flagged no_calibration", url, exc
            )
            return 0
        taken = 0
        with session_scope(make_session_factory(self.ctx.engine)) as session:
            session.execute(select(func.pg_advisory_xact_lock(CALIBRATION_LOCK_NAMESPACE, self.vendor_id)))
            for entry in entries:
                try:
                    upsert_calibration(
                        session,
                        vendor_id=self.vendor_id,
                        calibration_key=str(entry["calibration_id"]),
                        robot_id=str(entry["robot_id"]),
                        valid_from_ns=int(entry["valid_from_ns"]),
                        valid_to_ns=None if entry.get("valid_to_ns") is None else int(entry["valid_to_ns"]),
                        cameras=entry.get("cameras", {}),
                    )
                    taken += 1
                except (KeyError, TypeError, ValueError, AttributeError, CatalogConflictError,
                        CatalogValueError) as exc:  # fmt: skip
                    log.error("calibration sidecar %s: entry skipped: %s", url, exc)
        return taken

    # -- per episode ---------------------------------------------------------------------------------------

    def process(self, item: WorkItem) -> StepResult:
        if item.episode_id is None:
            raise ValueError(f"quality_pre needs an ingested episode; {item.key!r} has none")
        sha256, kind = self._episode_blob(item.episode_id)
        with self._local_copy(sha256) as path:
            if kind == SourceKind.MCAP:
                return self._gate_mcap(item.episode_id, path)
            return self._gate_video(item.episode_id, path)

    def _gate_mcap(self, episode_id: int, path: Path) -> StepResult:
        from pipeline.catalog.sources import StreamStats
        from pipeline.mcaplog import read_log
        from pipeline.quality.pregate import check_mcap, episode_ids, is_robot_contract, topic_gap_rates

        contract = self.vendor.topics
        robot = is_robot_contract(self.vendor)
        report = read_log(path, **read_log_options(self.vendor))
        relative = self._source_path(episode_id)
        values = episode_ids(report, self.vendor, relative)
        calibration_id = self._calibration(values.get("robot_id"), report.start_ns)
        outcomes = check_mcap(
            report,
            self.vendor,
            calibration_id=calibration_id,
            baseline_schemas=self._baseline_schemas(episode_id) if report.ok else {},
            relative_path=relative,
        )
        fingerprint = _fingerprint([t.content_digest for t in report.topics]) if report.ok and robot else None
        roles = _roles(contract)
        gaps = topic_gap_rates(report, self.vendor)  # the rates the gate judged, clock jumps taken out
        streams = [
            StreamStats(
                topic=t.topic,
                role=roles.get(t.topic, StreamRole.OTHER),
                message_count=t.message_count,
                encoding=t.message_encoding,
                schema_name=t.schema_name,
                schema_hash=t.schema_sha256,
                first_time_ns=t.start_ns,
                last_time_ns=t.end_ns,
                rate_hz=t.rate_hz,
                gap_rate=gaps.get(t.topic),
                backward_steps=t.backward_steps,
                duplicate_timestamps=t.duplicate_log_times,
                max_jump_ns=t.largest_jump_ns,
                skew_median_ns=t.skew_median_ns,
                skew_p99_ns=t.skew_abs_p99_ns,
                skew_max_ns=_abs_max(t.skew_min_ns, t.skew_max_ns),
            )
            for t in report.topics
        ]
        metadata = {
            "robot_id": values.get("robot_id"),
            "session_id": values.get("session_id"),
            "episode_key": values.get("episode_id"),
            "task": values.get("task"),
            "start_time_ns": report.start_ns,
            "end_time_ns": report.end_ns,
            "calibration_id": calibration_id,
        }
        return self._record(
            episode_id, outcomes, report.model_dump(mode="json"), streams, metadata, fingerprint
        )

    def _gate_video(self, episode_id: int, path: Path) -> StepResult:
        from pipeline.quality.pregate import check_video
        from pipeline.quality.recorded import clip_start_ns, parse_creation_time

        probe = self.prober.probe(path)
        outcomes = check_video(probe, self.vendor)
        # The vendor file is looked at only when the container does not say when it was recorded.
        mtime = None if parse_creation_time(probe.creation_time) else self._source_mtime_s(episode_id)
        start_ns, recorded_from = clip_start_ns(probe.creation_time, mtime)
        metadata: dict[str, int | None] = {"start_time_ns": None, "end_time_ns": None}
        if start_ns is not None and probe.duration_s is not None:
            metadata = {"start_time_ns": start_ns, "end_time_ns": start_ns + round(probe.duration_s * 1e9)}
        report = {**probe.model_dump(mode="json"), "recorded_from": recorded_from.value}
        return self._record(episode_id, outcomes, report, [], metadata, None)

    def _record(
        self,
        episode_id: int,
        outcomes: list[CheckOutcome],
        report: dict[str, Any],
        streams: list[Any],
        metadata: dict[str, Any],
        fingerprint: str | None,
    ) -> StepResult:
        from sqlalchemy import func, select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.runs import CheckRow, record_checks
        from pipeline.catalog.sources import record_streams, set_episode_metadata, set_episode_state
        from pipeline.quality.pregate import CheckOutcome, decide, failed_outcome

        with session_scope(make_session_factory(self.ctx.engine)) as session:
            if fingerprint is not None:
                lock_key = int(fingerprint[:8], 16) & 0x7FFFFFFF
                session.execute(select(func.pg_advisory_xact_lock(FINGERPRINT_LOCK_NAMESPACE, lock_key)))
                near = _near_duplicate(session, episode_id, fingerprint)
                outcomes.append(
                    CheckOutcome("near_duplicate", CheckStatus.PASSED)
                    if near is None
                    else failed_outcome(
                        "near_duplicate",
                        ReasonCode.NEAR_DUPLICATE,
                        f"the same messages as episode {near}, in another file layout",
                        observed={"episode_id": near},
                    )
                )
            verdict = decide(outcomes)
            if streams:
                record_streams(session, episode_id, streams)
            set_episode_metadata(session, episode_id, **metadata, content_fingerprint=fingerprint)
            record_checks(
                session,
                episode_id=episode_id,
                gate=Gate.PRE,
                config_hash=self.config_hash,
                checks=[
                    CheckRow("probe", CheckStatus.PASSED, report),
                    *(
                        CheckRow(o.name, o.status, o.observed, o.reason, o.severity, o.detail)
                        for o in outcomes
                    ),
                ],
            )
            set_episode_state(
                session,
                episode_id,
                verdict.state,
                reasons=verdict.reasons,
                detail=verdict.detail,
                step=self.name,
                config_hash=self.config_hash,
            )
        if verdict.state is FileState.QUARANTINED:
            return StepResult.rejected(verdict.reasons[0], verdict.detail or "", episode_id=episode_id)
        return StepResult.succeeded(
            episode_id=episode_id, state=verdict.state.value, reasons=[r.value for r in verdict.reasons]
        )

    # -- lookups -------------------------------------------------------------------------------------------

    def _episode_blob(self, episode_id: int) -> tuple[str, SourceKind]:
        from sqlalchemy import select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.models import Blob, Episode

        with session_scope(make_session_factory(self.ctx.engine)) as session:
            row = session.execute(
                select(Blob.sha256, Episode.kind)
                .join(Blob, Blob.id == Episode.blob_id)
                .where(Episode.id == episode_id)
            ).one()
        return row.sha256, SourceKind(row.kind)

    def _source_path(self, episode_id: int) -> str:
        """The episode's file's path in the vendor's drop, as the catalog spells it."""
        from sqlalchemy import select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.models import Episode, SourceFile

        with session_scope(make_session_factory(self.ctx.engine)) as session:
            return str(
                session.execute(
                    select(SourceFile.path)
                    .join(Episode, Episode.source_file_id == SourceFile.id)
                    .where(Episode.id == episode_id)
                ).scalar_one()
            )

    def _source_mtime_s(self, episode_id: int) -> float | None:
        """The modification time of the episode's file in the vendor's drop (None when it is gone)."""
        import fsspec

        relative = self._source_path(episode_id)
        url = self.vendor.source_url(self.ctx.settings.project_dir_abs)
        try:
            fs, root = fsspec.core.url_to_fs(url, **dict(self.vendor.source.storage_options))
            # Every content version of a path shares the path (its version is a column of its own).
            info = fs.info(f"{root.rstrip('/')}/{relative}")
        except (OSError, ValueError) as exc:
            log.info("episode %d: no modification time of its vendor file: %s", episode_id, exc)
            return None
        mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
        if hasattr(mtime, "timestamp"):
            mtime = mtime.timestamp()
        return float(mtime) if isinstance(mtime, int | float) else None

    @contextmanager
    def _local_copy(self, sha256: str) -> Iterator[Path]:
        """A local path to the raw object (the readers need one); remote stores are copied to a temp file."""
        store = self.ctx.store
        if store.local:
            yield store.local_raw_path(sha256)
            return
        with tempfile.TemporaryDirectory(prefix="sluice-pre-") as tmp:
            target = Path(tmp) / sha256
            with store.open_raw(sha256) as src, target.open("wb") as dst:
                while block := src.read(8 << 20):
                    dst.write(block)
            yield target

    def _calibration(self, robot_id: str | None, start_ns: int | None) -> int | None:
        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.sources import find_calibration

        if robot_id is None or start_ns is None or not self.vendor.calibration.enabled:
            return None
        with session_scope(make_session_factory(self.ctx.engine)) as session:
            return find_calibration(session, vendor_id=self.vendor_id, robot_id=robot_id, time_ns=start_ns)

    def _baseline_schemas(self, episode_id: int) -> dict[str, str]:
        """Schema hash per topic of the vendor's first accepted episode (the drift baseline)."""
        from sqlalchemy import select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.models import Episode, Stream

        with session_scope(make_session_factory(self.ctx.engine)) as session:
            first = session.execute(
                select(Episode.id)
                .where(
                    Episode.vendor_id == self.vendor_id,
                    Episode.id != episode_id,
                    Episode.state.in_([FileState.ACCEPTED.value, FileState.ACCEPTED_WITH_FLAGS.value]),
                )
                .order_by(Episode.id)
                .limit(1)
            ).scalar_one_or_none()
            if first is None:
                return {}
            rows = session.execute(
                select(Stream.topic, Stream.schema_hash).where(Stream.episode_id == first)
            ).all()
        return {r.topic: r.schema_hash for r in rows if r.schema_hash}


def _near_duplicate(session: Session, episode_id: int, fingerprint: str) -> int | None:
    """The first other episode with the same messages (any vendor), if there is one."""
    from sqlalchemy import func, select

    from pipeline.catalog.models import Episode

    return session.execute(
        select(func.min(Episode.id)).where(
            Episode.content_fingerprint == fingerprint, Episode.id != episode_id
        )
    ).scalar_one()


def _roles(contract: Any) -> dict[str, StreamRole]:
    if contract is None:
        return {}
    roles = {t.topic: StreamRole.ACTION for t in contract.actions}
    roles |= {t.topic: StreamRole.STATE for t in contract.state}
    roles |= {t.topic: StreamRole.CAMERA for t in contract.cameras}
    return roles


def _fingerprint(digests: Sequence[str | None]) -> str | None:
    """One order-independent fingerprint of an episode's messages (re-chunking keeps it)."""
    present = sorted(d for d in digests if d)
    if not present:
        return None
    return hashlib.sha256("\n".join(present).encode()).hexdigest()


def _abs_max(a: int | None, b: int | None) -> int | None:
    values = [abs(x) for x in (a, b) if x is not None]
    return max(values) if values else None
