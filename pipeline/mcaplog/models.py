"""Configs and results of the MCAP reader.

Split of responsibilities: this module *measures and reports*. Structural problems (truncation, CRC,
oversized records, unknown compression) are facts and end the read as a fatal finding. Content and timing
observations (encodings, gaps, clock jumps, skew) are reported as non-fatal findings against the
:class:`FindingThresholds` given, *and* as the raw numbers in :class:`TopicStats`, so that the quality gate
can decide states from its own thresholds without reading the file again.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from pipeline.enums import REASON_SEVERITY, ReasonCode, Severity

MiB = 2**20

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ReadLimits(BaseModel):
    """Resource bounds that keep a corrupt or hostile file from exhausting a worker."""

    model_config = _FROZEN

    # A record is read into memory whole; 256 MiB is far above the chunks our writers cut (≤ a few MiB per
    # topic group) and well below a worker's memory, so a length field of 2^60 is a finding, not a malloc.
    max_record_bytes: int = Field(default=256 * MiB, gt=0)
    # A chunk's decompressed size is bounded separately because compression multiplies it.
    max_chunk_uncompressed_bytes: int = Field(default=256 * MiB, gt=0)
    # The summary is read whole by the probe; a one-hour log with 1 MiB chunks has ~1 MB of chunk indexes.
    max_summary_bytes: int = Field(default=64 * MiB, gt=0)


class FindingThresholds(BaseModel):
    """Where a measured timing fact becomes a finding. The gate may re-judge from the raw stats."""

    model_config = _FROZEN

    # A forward or backward step between consecutive log times of a topic larger than this is a clock
    # jump; 1 s is 30 camera frames, far beyond any transport hiccup we have seen in synthetic logs.
    clock_jump_ns: int = Field(default=1_000_000_000, gt=0)
    # ...and it must also exceed this many expected periods, so a 0.5 Hz topic is not a jump every message.
    clock_jump_periods: float = Field(default=10.0, gt=0)
    # Fraction of expected messages missing (against the contract's rate) above which we report a gap.
    max_gap_rate: float = Field(default=0.01, ge=0, le=1)
    # |log_time - hardware stamp| above which the clocks are considered skewed; transport adds a few ms.
    max_clock_skew_ns: int = Field(default=100_000_000, gt=0)


class Finding(BaseModel):
    """One observation about a file: a reason code, a human detail, and where it was seen.

    ``fatal`` findings mean the read could not complete and the report carries no rows.
    """

    model_config = _FROZEN

    code: ReasonCode
    detail: str
    fatal: bool = False
    topic: str | None = None
    offset: int | None = None

    @property
    def severity(self) -> Severity:
        return REASON_SEVERITY[self.code]


class ChannelInfo(BaseModel):
    model_config = _FROZEN

    id: int
    topic: str
    message_encoding: str
    schema_id: int
    metadata: dict[str, str]


class SchemaInfo(BaseModel):
    model_config = _FROZEN

    id: int
    name: str
    encoding: str
    sha256: str
    size_bytes: int


class AttachmentInfo(BaseModel):
    model_config = _FROZEN

    name: str
    media_type: str
    log_time_ns: int
    create_time_ns: int
    size_bytes: int
    sha256: str
    crc_checked: bool
    offset: int


class MetadataInfo(BaseModel):
    model_config = _FROZEN

    name: str
    values: dict[str, str]


class StatisticsInfo(BaseModel):
    """The file's own Statistics record, as written (not as measured)."""

    model_config = _FROZEN

    message_count: int
    schema_count: int
    channel_count: int
    attachment_count: int
    metadata_count: int
    chunk_count: int
    message_start_ns: int
    message_end_ns: int
    channel_message_counts: dict[int, int]


class StructureProbe(BaseModel):
    """What the two ends of the file and its summary say, without reading the data section.

    ``None`` means "not known from the structure alone" (e.g. chunk CRCs of a file without chunk index).
    """

    model_config = _FROZEN

    size_bytes: int
    head_magic_ok: bool = False
    tail_magic_ok: bool = False
    header_profile: str | None = None
    header_library: str | None = None
    footer_ok: bool = False
    summary_start: int | None = None
    summary_offset_start: int | None = None
    summary_crc: int | None = None
    summary_present: bool = False
    summary_crc_ok: bool | None = None
    data_end_offset: int | None = None
    data_section_crc: int | None = None
    chunk_index_count: int = 0
    message_index_present: bool = False
    statistics: StatisticsInfo | None = None
    attachment_index_count: int = 0
    metadata_index_count: int = 0
    summary_offset_count: int = 0
    summary_schema_count: int = 0
    summary_channel_count: int = 0
    chunk_compressions: tuple[str, ...] = ()
    chunk_crcs_present: bool | None = None
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(f.fatal for f in self.findings)

    @property
    def chunk_index_present(self) -> bool:
        return self.chunk_index_count > 0

    @property
    def data_section_crc_present(self) -> bool | None:
        return None if self.data_section_crc is None else self.data_section_crc != 0


class CrcCoverage(BaseModel):
    """Which bytes a full read could verify. Every CRC that is present was checked."""

    model_config = _FROZEN

    data_section_crc_present: bool
    summary_crc_present: bool
    chunks_total: int
    chunks_with_crc: int
    attachments_total: int
    attachments_with_crc: int
    unchunked_message_count: int

    @property
    def messages_covered(self) -> bool:
        """Every message byte sits under some CRC (the data-section CRC or its chunk's CRC)."""
        if self.data_section_crc_present:
            return True
        return self.chunks_with_crc == self.chunks_total and self.unchunked_message_count == 0


class ContentProblem(BaseModel):
    """One message whose content is bad (a picture that does not decode, joint names that changed...).

    ``frame``: the message's index on its topic, in file order; ``offset``: the byte offset inside its
    payload (the picture's bytes for a camera) where the problem was seen, when it is tied to one place.
    """

    model_config = _FROZEN

    code: ReasonCode
    detail: str
    frame: int | None = None
    log_time_ns: int | None = None
    offset: int | None = None


class ContentStats(BaseModel):
    """What a content probe (see :func:`pipeline.mcaplog.read_log`'s ``content_probes``) found on a topic:
    the pictures' formats and sizes for a camera, the entry names for a named-vector stream."""

    model_config = _FROZEN

    kind: str  # "camera" or "series"
    family: str | None = None
    messages: int = 0
    decoded: int = 0  # pictures decoded in full (cameras), records read (series)
    formats: tuple[str, ...] = ()  # payload formats or raw pixel encodings seen, in order seen
    sizes: tuple[str, ...] = ()  # picture sizes seen ("640x480"), in order seen
    width_px: int | None = None  # of the first picture
    height_px: int | None = None
    names: tuple[str, ...] = ()  # a named-vector stream's names (JointState.name) in its first message
    problems: tuple[ContentProblem, ...] = ()  # the first few
    problem_count: int = 0


class TopicStats(BaseModel):
    """Per-topic measurements of one full read. Times are log times in ns; skew is log_time - stamp."""

    model_config = _FROZEN

    topic: str
    channel_ids: tuple[int, ...]
    message_encoding: str
    schema_name: str | None
    schema_encoding: str | None
    schema_sha256: str | None
    message_count: int
    payload_bytes: int
    start_ns: int | None
    end_ns: int | None
    rate_hz: float | None
    median_interval_ns: int | None
    expected_rate_hz: float | None = None
    expected_count: int | None = None
    gap_rate: float | None = None
    backward_steps: int = 0
    max_backward_step_ns: int = 0
    duplicate_log_times: int = 0
    largest_jump_ns: int = 0
    largest_jump_at_ns: int | None = None
    stamp_field: str | None = None
    stamped_count: int = 0
    skew_min_ns: int | None = None
    skew_max_ns: int | None = None
    skew_mean_ns: float | None = None
    skew_median_ns: int | None = None  # median of log time - stamp (signed: which clock is ahead)
    skew_abs_p99_ns: int | None = None  # 99th percentile of |log time - stamp|
    decode_errors: int = 0
    content_digest: str | None = None
    content: ContentStats | None = None


class LogReport(BaseModel):
    """The result of :func:`pipeline.mcaplog.read_log`.

    When ``ok`` is false the read hit a fatal problem: ``findings`` says which, and every row-bearing field
    (topics, channels, schemas, attachments, metadata) is empty — nothing read before the failure is
    returned. ``messages_seen`` still tells how far the reader got.
    """

    model_config = _FROZEN

    source: str
    size_bytes: int
    ok: bool
    findings: tuple[Finding, ...]
    structure: StructureProbe
    profile: str | None = None
    library: str | None = None
    topics: tuple[TopicStats, ...] = ()
    channels: tuple[ChannelInfo, ...] = ()
    schemas: tuple[SchemaInfo, ...] = ()
    attachments: tuple[AttachmentInfo, ...] = ()
    metadata: tuple[MetadataInfo, ...] = ()
    message_count: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    chunk_count: int = 0
    compressions: tuple[str, ...] = ()
    crc: CrcCoverage | None = None
    messages_seen: int = 0
    bytes_read: int = 0
    read_s: float = 0.0

    @property
    def fatal(self) -> Finding | None:
        return next((f for f in self.findings if f.fatal), None)

    @property
    def reason_codes(self) -> tuple[ReasonCode, ...]:
        """Distinct reason codes in the order they were first found."""
        return tuple(dict.fromkeys(f.code for f in self.findings))

    @property
    def throughput_mb_s(self) -> float | None:
        return self.bytes_read / self.read_s / 1e6 if self.read_s > 0 else None

    def topic(self, name: str) -> TopicStats | None:
        return next((t for t in self.topics if t.topic == name), None)

    def metadata_record(self, name: str) -> MetadataInfo | None:
        """The first metadata record called ``name`` (e.g. ``episode``)."""
        return next((m for m in self.metadata if m.name == name), None)
