"""``read_log``: one full, CRC-validated pass over an MCAP file that returns staged per-topic statistics."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import IO, Protocol

from mcap.records import Attachment, Channel, Message, Metadata, Schema

from pipeline.enums import ReasonCode
from pipeline.errors import UnknownChoiceError
from pipeline.mcaplog.decode import DEFAULT_STAMP_FIELDS
from pipeline.mcaplog.exceptions import McapInputError
from pipeline.mcaplog.framing import SUPPORTED_COMPRESSIONS, open_source
from pipeline.mcaplog.models import (
    AttachmentInfo,
    ChannelInfo,
    ContentStats,
    CrcCoverage,
    Finding,
    FindingThresholds,
    LogReport,
    MetadataInfo,
    ReadLimits,
    SchemaInfo,
    StructureProbe,
)
from pipeline.mcaplog.probe import probe_file
from pipeline.mcaplog.scan import Item, ScanFacts, Scanner
from pipeline.mcaplog.stats import DigestThread, StampReader, TopicAccumulator

logger = logging.getLogger(__name__)


class ContentProbe(Protocol):
    """Looks into every message of one topic during the read (see ``content_probes``)."""

    def add(self, log_time: int, data: bytes) -> None: ...

    def result(self) -> ContentStats: ...


#: Makes the probe of a topic from its schema and first channel.
ProbeFactory = Callable[[Schema | None, Channel], ContentProbe]


def read_log(
    source: str | Path | IO[bytes],
    *,
    limits: ReadLimits | None = None,
    allowed_compressions: Collection[str] = SUPPORTED_COMPRESSIONS,
    allowed_encodings: Collection[str] | None = None,
    expected_rates_hz: Mapping[str, float] | None = None,
    stamp_fields: tuple[str, ...] = DEFAULT_STAMP_FIELDS,
    thresholds: FindingThresholds | None = None,
    content_digest: bool = False,
    content_probes: Mapping[str, ProbeFactory] | None = None,
) -> LogReport:
    """Read a whole MCAP file once, validating every CRC it carries, and measure every topic.

    Works on chunked and unchunked files, with or without summary and indexes. Everything is staged while
    reading and returned only if the reader reached the closing magic cleanly and every CRC and index
    claim checked out; otherwise the report has ``ok=False``, one fatal finding saying what and where, and
    no rows (a CRC error after the last message fails the whole read).

    ``allowed_compressions``: chunk compressions the vendor contract accepts (a readable but disallowed one
    is a finding; an unreadable one is fatal). ``allowed_encodings``: accepted message encodings, ``None``
    accepts any. ``expected_rates_hz``: topic → contract rate, for gap rates. ``stamp_fields``: dotted
    payload fields tried for a hardware stamp (JSON ``stamp_ns``, protobuf ``timestamp``, ROS
    ``header.stamp``...). ``content_digest``: also compute an order-independent digest of each topic's
    messages (finds the same messages re-chunked); payloads of 16 KiB and more (camera frames) are hashed
    on a helper thread beside the read (``sluice bench ingest``: the CRC-checked read of a robot log went
    from 0.312 to 0.372 of sha256's speed, for a little more CPU). ``content_probes``: topic -> a factory of
    a :class:`ContentProbe` that sees every message of the topic (the pre-gate's picture and joint-name
    checks, :mod:`pipeline.families.probe`); its result is the topic's ``content``.
    Bad input never raises; an unreadable file raises :class:`~pipeline.errors.StoreError`.
    """
    unknown = set(allowed_compressions) - set(SUPPORTED_COMPRESSIONS)
    if unknown:
        raise UnknownChoiceError("chunk compression", sorted(unknown)[0], SUPPORTED_COMPRESSIONS)
    limits = limits or ReadLimits()
    thresholds = thresholds or FindingThresholds()
    started = time.perf_counter()
    with open_source(source) as src:
        probe, _ = probe_file(src.file, src.size_bytes, limits)
        if not probe.head_magic_ok:
            return _failed(src.name, probe, probe.findings, 0, 0, started)
        scanner = Scanner(
            src.file,
            src.size_bytes,
            limits,
            tail_magic_ok=probe.tail_magic_ok,
            data_section_crc_expected=probe.data_section_crc != 0,
        )
        staging = _Staging(
            allowed_encodings=allowed_encodings,
            stamp_fields=stamp_fields,
            content_digest=content_digest,
            content_probes={} if content_probes is None else content_probes,
        )
        try:
            try:
                for item in scanner.items():
                    staging.take(item, scanner)
            except McapInputError as exc:
                fatal = Finding(code=exc.code, detail=exc.detail, fatal=True, offset=exc.offset)
                others = tuple(f for f in probe.findings if f.fatal and f.code != exc.code)
                logger.info("%s: read failed after %d messages: %s", src.name, staging.messages, exc)
                return _failed(src.name, probe, (fatal, *others), staging.messages, src.file.tell(), started)
            if not probe.ok:
                return _failed(src.name, probe, probe.findings, staging.messages, src.size_bytes, started)
            report = staging.commit(
                source=src.name,
                probe=probe,
                facts=scanner.facts,
                allowed_compressions=allowed_compressions,
                expected_rates_hz=expected_rates_hz or {},
                thresholds=thresholds,
                read_s=time.perf_counter() - started,
            )
        finally:
            staging.close()
    logger.info(
        "%s: %d messages on %d topics, %d finding(s), %.1f MB/s",
        report.source,
        report.message_count,
        len(report.topics),
        len(report.findings),
        report.throughput_mb_s or 0.0,
    )
    return report


def _failed(
    source: str,
    probe: StructureProbe,
    findings: tuple[Finding, ...],
    messages_seen: int,
    bytes_read: int,
    started: float,
) -> LogReport:
    return LogReport(
        source=source,
        size_bytes=probe.size_bytes,
        ok=False,
        findings=findings,
        structure=probe,
        profile=probe.header_profile,
        library=probe.header_library,
        messages_seen=messages_seen,
        bytes_read=bytes_read,
        read_s=time.perf_counter() - started,
    )


class _Staging:
    """Rows built during the pass; nothing here leaves unless the pass ended cleanly."""

    def __init__(
        self,
        *,
        allowed_encodings: Collection[str] | None,
        stamp_fields: tuple[str, ...],
        content_digest: bool,
        content_probes: Mapping[str, ProbeFactory],
    ) -> None:
        self._allowed_encodings = None if allowed_encodings is None else frozenset(allowed_encodings)
        self._stamp_fields = stamp_fields
        self._content_digest = content_digest
        # the big payloads' digests are computed beside the read (see DigestThread)
        self._digest_thread = DigestThread() if content_digest else None
        self.messages = 0
        self.schemas: list[SchemaInfo] = []
        self.channels: list[ChannelInfo] = []
        self.attachments: list[AttachmentInfo] = []
        self.metadata: list[MetadataInfo] = []
        self.findings: list[Finding] = []
        self._topics: dict[str, TopicAccumulator] = {}
        self._by_channel: dict[int, TopicAccumulator] = {}
        self._stamps: dict[int, StampReader] = {}
        self._drift: set[str] = set()
        self._probe_factories = content_probes
        self._probes: dict[str, ContentProbe] = {}
        self._probe_by_channel: dict[int, ContentProbe] = {}

    def take(self, item: Item, scanner: Scanner) -> None:
        record = item.record
        if isinstance(record, Message):
            self.messages += 1
            acc = self._by_channel[record.channel_id]
            acc.add(record.log_time, record.data)
            reader = self._stamps[record.channel_id]
            if reader.active:
                stamp = reader.read(record.data)
                if stamp is not None:
                    acc.add_stamp(record.log_time, stamp)
            probe = self._probe_by_channel.get(record.channel_id)
            if probe is not None:
                probe.add(record.log_time, record.data)
        elif isinstance(record, Channel):
            self._channel(record, scanner.schemas.get(record.schema_id))
        elif isinstance(record, Schema):
            self.schemas.append(
                SchemaInfo(
                    id=record.id,
                    name=record.name,
                    encoding=record.encoding,
                    sha256=hashlib.sha256(record.data).hexdigest(),
                    size_bytes=len(record.data),
                )
            )
        elif isinstance(record, Metadata):
            self.metadata.append(MetadataInfo(name=record.name, values=dict(record.metadata)))
        elif isinstance(record, Attachment):
            self.attachments.append(
                AttachmentInfo(
                    name=record.name,
                    media_type=record.media_type,
                    log_time_ns=record.log_time,
                    create_time_ns=record.create_time,
                    size_bytes=len(record.data),
                    sha256=hashlib.sha256(record.data).hexdigest(),
                    crc_checked=item.crc_checked,
                    offset=item.offset,
                )
            )

    def _channel(self, channel: Channel, schema: Schema | None) -> None:
        self.channels.append(
            ChannelInfo(
                id=channel.id,
                topic=channel.topic,
                message_encoding=channel.message_encoding,
                schema_id=channel.schema_id,
                metadata=dict(channel.metadata),
            )
        )
        acc = self._topics.get(channel.topic)
        if acc is None:
            acc = TopicAccumulator(
                channel.topic,
                channel,
                schema,
                digest=self._content_digest,
                digest_thread=self._digest_thread,
            )
            self._topics[channel.topic] = acc
        else:
            acc.channel_ids.append(channel.id)
            same_schema = (schema is None and acc.schema is None) or (
                schema is not None
                and acc.schema is not None
                and (schema.name, schema.encoding, schema.data)
                == (acc.schema.name, acc.schema.encoding, acc.schema.data)
            )
            if channel.message_encoding != acc.message_encoding or not same_schema:
                self._drift.add(channel.topic)
        self._by_channel[channel.id] = acc
        factory = self._probe_factories.get(channel.topic)
        if factory is not None:
            if channel.topic not in self._probes:
                self._probes[channel.topic] = factory(schema, channel)
            self._probe_by_channel[channel.id] = self._probes[channel.topic]
        self._stamps[channel.id] = StampReader(schema, channel, self._stamp_fields)
        if self._allowed_encodings is not None and channel.message_encoding not in self._allowed_encodings:
            self.findings.append(
                Finding(
                    code=ReasonCode.UNSUPPORTED_ENCODING,
                    detail=f"{channel.topic}: message encoding {channel.message_encoding!r}; allowed: "
                    f"{', '.join(sorted(self._allowed_encodings))}",
                    topic=channel.topic,
                )
            )

    def close(self) -> None:
        """Stop the digest thread (what it still had queued is dropped); safe to call more than once."""
        if self._digest_thread is not None:
            self._digest_thread.close()

    def commit(
        self,
        *,
        source: str,
        probe: StructureProbe,
        facts: ScanFacts,
        allowed_compressions: Collection[str],
        expected_rates_hz: Mapping[str, float],
        thresholds: FindingThresholds,
        read_s: float,
    ) -> LogReport:
        findings = list(self.findings)
        disallowed = sorted(set(facts.compressions) - set(allowed_compressions))
        if disallowed:
            findings.append(
                Finding(
                    code=ReasonCode.UNKNOWN_COMPRESSION,
                    detail=f"chunk compression(s) {disallowed} not allowed; "
                    f"allowed: {sorted(allowed_compressions)}",
                )
            )
        crc = CrcCoverage(
            data_section_crc_present=bool(facts.data_section_crc),
            summary_crc_present=bool(facts.footer and facts.footer.summary_crc),
            chunks_total=facts.chunks_total,
            chunks_with_crc=facts.chunks_with_crc,
            attachments_total=facts.attachments_total,
            attachments_with_crc=facts.attachments_with_crc,
            unchunked_message_count=facts.unchunked_messages,
        )
        if not crc.messages_covered:
            findings.append(
                Finding(
                    code=ReasonCode.CRC_ABSENT,
                    detail="no data-section CRC; "
                    f"{crc.chunks_total - crc.chunks_with_crc} of {crc.chunks_total} "
                    f"chunk(s) without CRC and {crc.unchunked_message_count} message(s) outside chunks: "
                    "corruption there cannot be detected",
                )
            )
        if facts.messages == 0:
            findings.append(Finding(code=ReasonCode.NO_MESSAGES, detail="the file holds no messages"))
        if self._digest_thread is not None:
            self._digest_thread.drain()
        topics = []
        for name, acc in self._topics.items():
            readers = [self._stamps[c] for c in acc.channel_ids]
            acc.stamp_field = next((r.field for r in readers if r.field), None)
            acc.decode_errors = sum(r.errors for r in readers)
            stats, topic_findings = acc.finish(
                episode_start_ns=facts.message_start_ns,
                episode_end_ns=facts.message_end_ns,
                expected_rate_hz=expected_rates_hz.get(name),
                thresholds=thresholds,
                schema_drift=name in self._drift,
            )
            content_probe = self._probes.get(name)
            if content_probe is not None:
                stats = stats.model_copy(update={"content": content_probe.result()})
            topics.append(stats)
            findings.extend(topic_findings)
        header = facts.header
        return LogReport(
            source=source,
            size_bytes=probe.size_bytes,
            ok=True,
            findings=tuple(findings),
            structure=probe,
            profile=header.profile if header else None,
            library=header.library if header else None,
            topics=tuple(topics),
            channels=tuple(self.channels),
            schemas=tuple(self.schemas),
            attachments=tuple(self.attachments),
            metadata=tuple(self.metadata),
            message_count=facts.messages,
            start_ns=facts.message_start_ns,
            end_ns=facts.message_end_ns,
            chunk_count=facts.chunks_total,
            compressions=tuple(sorted(facts.compressions)),
            crc=crc,
            messages_seen=self.messages,
            bytes_read=facts.bytes_read,
            read_s=read_s,
        )
