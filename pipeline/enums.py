"""Statuses, kinds and reason codes shared by the library and the catalog.

Every enum here is mirrored by a CHECK constraint in the catalog (``sql/``); a test compares the two, so
adding a member means adding a migration. Values are the words stored in the database and shown to users:
one word per concept (the step ``transcode`` is the module, the task_id and the catalog value).
"""

from __future__ import annotations

from enum import StrEnum


class StepName(StrEnum):
    """The per-batch steps, in pipeline order."""

    INGEST = "ingest"
    QUALITY_PRE = "quality_pre"
    TRANSCODE = "transcode"
    QUALITY_POST = "quality_post"
    ANNOTATE = "annotate"
    SHARD = "shard"


class SourceKind(StrEnum):
    """What a vendor delivers."""

    MCAP = "mcap"
    VIDEO = "video"


class FileState(StrEnum):
    """The one terminal state every input ends in (``pending`` only while it is being processed)."""

    PENDING = "pending"
    ACCEPTED = "accepted"
    ACCEPTED_WITH_FLAGS = "accepted_with_flags"
    QUARANTINED = "quarantined"
    DUPLICATE = "duplicate"


TERMINAL_FILE_STATES = frozenset(
    {FileState.ACCEPTED, FileState.ACCEPTED_WITH_FLAGS, FileState.QUARANTINED, FileState.DUPLICATE}
)


class Severity(StrEnum):
    """What a finding does to its input: a flag keeps it, a quarantine holds it back."""

    FLAG = "flag"
    QUARANTINE = "quarantine"


class ReasonCode(StrEnum):
    """Why an input was flagged or quarantined. ``REASON_SEVERITY`` gives each code's default effect."""

    # container / structure
    ZERO_BYTES = "zero_bytes"
    BAD_MAGIC = "bad_magic"
    TRUNCATED = "truncated"
    CRC_MISMATCH = "crc_mismatch"
    CRC_ABSENT = "crc_absent"
    RECORD_TOO_LARGE = "record_too_large"
    UNKNOWN_COMPRESSION = "unknown_compression"
    CONTAINER_ERROR = "container_error"
    DISALLOWED_CONTAINER = "disallowed_container"
    OUTSIDE_VENDOR_ROOT = "outside_vendor_root"
    # contract
    UNSUPPORTED_ENCODING = "unsupported_encoding"
    MISSING_REQUIRED_TOPIC = "missing_required_topic"
    NO_MESSAGES = "no_messages"
    SCHEMA_DRIFT = "schema_drift"
    NO_CALIBRATION = "no_calibration"
    MISSING_METADATA = "missing_metadata"
    # timing
    NON_MONOTONIC_TIME = "non_monotonic_time"
    DUPLICATE_TIMESTAMPS = "duplicate_timestamps"
    CLOCK_JUMP = "clock_jump"
    CLOCK_SKEW = "clock_skew"
    GAP_RATE_HIGH = "gap_rate_high"
    # video
    DECODE_ERROR = "decode_error"
    NO_VIDEO_STREAM = "no_video_stream"
    BLANK_VIDEO = "blank_video"
    MISSING_LEADING_KEYFRAME = "missing_leading_keyframe"
    TOO_FEW_FRAMES = "too_few_frames"
    ROTATED = "rotated"
    INTERLACED = "interlaced"
    VARIABLE_FRAME_RATE = "variable_frame_rate"
    LETTERBOXED = "letterboxed"
    RESOLUTION_OUT_OF_BOUNDS = "resolution_out_of_bounds"
    FRAME_RATE_OUT_OF_BOUNDS = "frame_rate_out_of_bounds"
    DURATION_OUT_OF_BOUNDS = "duration_out_of_bounds"
    PROBE_TIMEOUT = "probe_timeout"
    PROBE_RESOURCE_LIMIT = "probe_resource_limit"
    # duplicates
    NEAR_DUPLICATE = "near_duplicate"
    # post-gate / derived outputs
    TRANSCODE_FAILED = "transcode_failed"
    GOP_MISMATCH = "gop_mismatch"
    FRAME_COUNT_MISMATCH = "frame_count_mismatch"
    DURATION_MISMATCH = "duration_mismatch"
    PSNR_BELOW_THRESHOLD = "psnr_below_threshold"
    RESAMPLE_ERROR = "resample_error"
    ANNOTATOR_FAILED = "annotator_failed"
    SHARD_VERIFY_FAILED = "shard_verify_failed"


_FLAGS = {
    ReasonCode.CRC_ABSENT,
    ReasonCode.SCHEMA_DRIFT,
    ReasonCode.NO_CALIBRATION,
    ReasonCode.NON_MONOTONIC_TIME,
    ReasonCode.DUPLICATE_TIMESTAMPS,
    ReasonCode.CLOCK_SKEW,
    ReasonCode.MISSING_LEADING_KEYFRAME,
    ReasonCode.ROTATED,
    ReasonCode.INTERLACED,
    ReasonCode.VARIABLE_FRAME_RATE,
    ReasonCode.LETTERBOXED,
    ReasonCode.NEAR_DUPLICATE,
    ReasonCode.ANNOTATOR_FAILED,
}

REASON_SEVERITY: dict[ReasonCode, Severity] = {
    code: (Severity.FLAG if code in _FLAGS else Severity.QUARANTINE) for code in ReasonCode
}


class StepStatus(StrEnum):
    """Outcome of one step on one item (unique per episode, step, config hash)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    REJECTED = "rejected"
    FAILED = "failed"
    SKIPPED = "skipped"


class RunOutcome(StrEnum):
    """Outcome of a pipeline run, decided by ``finalize``."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    SUCCEEDED_WITH_WARNINGS = "succeeded_with_warnings"
    FAILED = "failed"


class Gate(StrEnum):
    PRE = "quality_pre"
    POST = "quality_post"


class CheckStatus(StrEnum):
    PASSED = "passed"
    WARNED = "warned"
    FAILED = "failed"


class StreamRole(StrEnum):
    CAMERA = "camera"
    STATE = "state"
    ACTION = "action"
    CALIBRATION = "calibration"
    OTHER = "other"


class ArtifactKind(StrEnum):
    TRANSCODED_EPISODE = "transcoded_episode"
    CLIP = "clip"
    ANNOTATION = "annotation"
    SHARD = "shard"
    MANIFEST = "manifest"
    EXPORT = "export"


class ManifestFormat(StrEnum):
    ARROW_IPC = "arrow_ipc"
    PARQUET = "parquet"


class Split(StrEnum):
    TRAIN = "train"
    VAL = "val"
    EVAL = "eval"
