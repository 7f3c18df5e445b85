"""The ``quality_pre`` step: probe each landed input, gate it, and record the one state it ends in.

Robot logs get a full CRC-validated read (:func:`pipeline.mcaplog.read_log`); videos a sandboxed PyAV probe
(:func:`pipeline.videoprobe.probe_video`). The measurements are stored (streams, episode metadata, the full
probe report as JSON in the check results), then :mod:`pipeline.quality.pregate` runs the Great Expectations
suites and the contract, and every check result and the final state are written in one transaction.
Quarantined inputs stay in the raw store untouched.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

from pipeline.enums import Gate, ReasonCode, SourceKind, StepName, StreamRole
from pipeline.steps.base import Step, StepResult, WorkItem
from pipeline.steps.ingest import IngestStep, registered_episodes

log = logging.getLogger(__name__)


class QualityPreStep(Step):
    """Probe and gate the episodes of a batch."""

    name = StepName.QUALITY_PRE

    @cached_property
    def vendor_id(self) -> int:
        return IngestStep(self.vendor, self.ctx).vendor_id

    def setup(self) -> None:
        self.load_calibrations()

    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        from sqlalchemy import select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.models import Episode
        from pipeline.enums import FileState

        paths = [i.source_path or i.key for i in batch_items]
        known = registered_episodes(self.ctx.engine, self.vendor_id, paths)
        ids = [hit[0] for hit in known.values()]
        if not ids:
            return []
        with session_scope(make_session_factory(self.ctx.engine)) as session:
            duplicates = set(
                session.execute(
                    select(Episode.id).where(Episode.id.in_(ids), Episode.state == FileState.DUPLICATE.value)
                ).scalars()
            )
        return [
            WorkItem(key=path, episode_id=known[path][0], source_path=path, size_bytes=known[path][1])
            for path in paths
            if path in known and known[path][0] not in duplicates
        ]

    # -- calibration ---------------------------------------------------------------------------------------

    def load_calibrations(self) -> int:
        """Register the vendor's calibration sidecar (if it ships one); returns how many it holds."""
        import fsspec

        from pipeline.catalog import make_session_factory, session_scope
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
            entries = json.loads(f.read(16 << 20))
        with session_scope(make_session_factory(self.ctx.engine)) as session:
            for entry in entries:
                upsert_calibration(
                    session,
                    vendor_id=self.vendor_id,
                    calibration_key=str(entry["calibration_id"]),
                    robot_id=str(entry["robot_id"]),
                    valid_from_ns=int(entry["valid_from_ns"]),
                    valid_to_ns=None if entry.get("valid_to_ns") is None else int(entry["valid_to_ns"]),
                    cameras=entry.get("cameras", {}),
                )
        return len(entries)

    # -- per episode ---------------------------------------------------------------------------------------

    def process(self, item: WorkItem) -> StepResult:
        assert item.episode_id is not None
        sha256, kind = self._episode_blob(item.episode_id)
        with self._local_copy(sha256) as path:
            if kind == SourceKind.MCAP:
                return self._gate_mcap(item.episode_id, path)
            return self._gate_video(item.episode_id, path)

    def _gate_mcap(self, episode_id: int, path: Path) -> StepResult:
        from pipeline.catalog.sources import StreamStats
        from pipeline.mcaplog import ReadLimits, read_log
        from pipeline.quality.pregate import check_mcap, decide

        contract = self.vendor.topics
        expected = {t.topic: t.rate_hz for t in contract.all_topics()} if contract else {}
        stamp_fields = (
            tuple(sorted({t.stamp_field for t in contract.all_topics() if t.stamp_field})) if contract else ()
        )
        report = read_log(
            path,
            limits=ReadLimits(max_record_bytes=int(self.vendor.ingest.max_record_bytes)),
            # the config says "none" where the MCAP format writes an empty string
            allowed_compressions=tuple("" if c == "none" else c for c in contract.compressions)
            if contract
            else ("", "lz4", "zstd"),
            allowed_encodings=None,  # the gate checks encodings against the contract itself
            expected_rates_hz=expected,
            stamp_fields=stamp_fields or ("stamp_ns", "timestamp", "header.stamp"),
            content_digest=True,
        )
        meta = report.metadata_record("episode")
        values = dict(meta.values) if meta is not None else {}
        calibration_id = self._calibration(values.get("robot_id"), report.start_ns)
        outcomes = check_mcap(
            report,
            self.vendor,
            calibration_id=calibration_id,
            baseline_schemas=self._baseline_schemas(episode_id),
        )
        fingerprint = _fingerprint([t.content_digest for t in report.topics]) if report.ok else None
        cameras = {c.topic for c in contract.cameras} if contract else set()
        states = {t.topic for t in contract.state} if contract else set()
        actions = {t.topic for t in contract.actions} if contract else set()
        streams = [
            StreamStats(
                topic=t.topic,
                role=(
                    StreamRole.CAMERA
                    if t.topic in cameras
                    else StreamRole.STATE
                    if t.topic in states
                    else StreamRole.ACTION
                    if t.topic in actions
                    else StreamRole.OTHER
                ),
                message_count=t.message_count,
                encoding=t.message_encoding,
                schema_name=t.schema_name,
                schema_hash=t.schema_sha256,
                first_time_ns=t.start_ns,
                last_time_ns=t.end_ns,
                rate_hz=t.rate_hz,
                gap_rate=t.gap_rate,
                backward_steps=t.backward_steps,
                duplicate_timestamps=t.duplicate_log_times,
                max_jump_ns=t.largest_jump_ns,
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
            episode_id, outcomes, decide, report.model_dump(mode="json"), streams, metadata, fingerprint
        )

    def _gate_video(self, episode_id: int, path: Path) -> StepResult:
        from pipeline.quality.pregate import check_video, decide
        from pipeline.videoprobe import VideoProbeLimits, probe_video

        pre = self.vendor.quality.pre
        limits = VideoProbeLimits(
            max_pixels=self.vendor.video.max_pixels if self.vendor.video else 7680 * 4320,
            memory_limit_bytes=int(self.vendor.ingest.probe_memory_bytes),
            timeout_s=float(self.vendor.ingest.probe_timeout_s),
            letterbox_min_fraction=max(pre.letterbox_min_fraction, 1e-6),
            min_frames=max(pre.min_frames, 1),
        )
        probe = probe_video(path, limits=limits)
        outcomes = check_video(probe, self.vendor)
        metadata = {
            "start_time_ns": 0 if probe.duration_s else None,
            "end_time_ns": int(probe.duration_s * 1e9) if probe.duration_s else None,
        }
        return self._record(episode_id, outcomes, decide, probe.model_dump(mode="json"), [], metadata, None)

    def _record(
        self,
        episode_id: int,
        outcomes: list[Any],
        decide: Any,
        report: dict[str, Any],
        streams: list[Any],
        metadata: dict[str, Any],
        fingerprint: str | None,
    ) -> StepResult:
        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.runs import record_check
        from pipeline.catalog.sources import record_streams, set_episode_metadata, set_episode_state
        from pipeline.enums import CheckStatus, FileState
        from pipeline.quality.pregate import CheckOutcome

        with session_scope(make_session_factory(self.ctx.engine)) as session:
            near = self._near_duplicate(session, episode_id, fingerprint) if fingerprint else None
            if near is not None:
                outcomes.append(
                    CheckOutcome(
                        "near_duplicate",
                        CheckStatus.WARNED,
                        ReasonCode.NEAR_DUPLICATE,
                        observed={"episode_id": near},
                        detail=f"same messages as episode {near}",
                    )
                )
            verdict = decide(outcomes)
            if streams:
                record_streams(session, episode_id, streams)
            set_episode_metadata(session, episode_id, **metadata, content_fingerprint=fingerprint)
            record_check(
                session,
                episode_id=episode_id,
                gate=Gate.PRE,
                check_name="probe",
                config_hash=self.config_hash,
                status=CheckStatus.PASSED,
                observed=report,
            )
            for o in outcomes:
                record_check(
                    session,
                    episode_id=episode_id,
                    gate=Gate.PRE,
                    check_name=o.name,
                    config_hash=self.config_hash,
                    status=o.status,
                    observed=dict(o.observed),
                    reason=o.reason,
                    severity=o.severity,
                    detail=o.detail,
                )
            set_episode_state(
                session, episode_id, verdict.state, reasons=verdict.reasons, detail=verdict.detail
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

        if robot_id is None or start_ns is None:
            return None
        with session_scope(make_session_factory(self.ctx.engine)) as session:
            return find_calibration(session, vendor_id=self.vendor_id, robot_id=robot_id, time_ns=start_ns)

    def _baseline_schemas(self, episode_id: int) -> dict[str, str]:
        """Schema hash per topic of the vendor's first accepted episode (the drift baseline)."""
        from sqlalchemy import select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.models import Episode, Stream
        from pipeline.enums import FileState

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

    @staticmethod
    def _near_duplicate(session: Any, episode_id: int, fingerprint: str) -> int | None:
        from sqlalchemy import func, select

        from pipeline.catalog.models import Episode

        return session.execute(
            select(func.min(Episode.id)).where(
                Episode.content_fingerprint == fingerprint, Episode.id != episode_id
            )
        ).scalar_one()


def _fingerprint(digests: Sequence[str | None]) -> str | None:
    """One order-independent fingerprint of an episode's messages (re-chunking keeps it)."""
    present = sorted(d for d in digests if d)
    if not present:
        return None
    return hashlib.sha256("\n".join(present).encode()).hexdigest()


def _abs_max(a: int | None, b: int | None) -> int | None:
    values = [abs(x) for x in (a, b) if x is not None]
    return max(values) if values else None
