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


class PassOverReason(StrEnum):
    """Why a file under a vendor root was not taken (``passed_over_files.why``)."""

    OUTSIDE_ROOT = "outside_root"  # resolves (through a link) outside the root
    LINK = "link"  # a symbolic link met while opening it (swapped in after discovery)
    HARD_LINK = "hard_link"  # a regular file with more than one name: another may lie outside the root
    NOT_REGULAR = "not_regular"  # a FIFO, socket or device
    UNREADABLE = "unreadable"  # vanished, or not readable
    NOT_READY = "not_ready"  # still being written (not recorded: the next run looks again)


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
    COLOUR_MISMATCH = "colour_mismatch"
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


#: What each reason code means, for the generated reference (docs/reference/reason-codes.md) and the UI.
REASON_DESCRIPTIONS: dict[ReasonCode, str] = {
    ReasonCode.ZERO_BYTES: "The file is empty (a failed upload); probes refuse it before opening.",
    ReasonCode.BAD_MAGIC: "The file does not start (or end) with its format's magic bytes: wrong type under a right extension.",
    ReasonCode.TRUNCATED: "The file ends before its structure says it should (power loss, partial upload).",
    ReasonCode.CRC_MISMATCH: "A stored CRC (chunk, data section, summary, attachment) does not match the bytes.",
    ReasonCode.CRC_ABSENT: "Some message bytes are covered by no CRC, so corruption there could not be detected.",
    ReasonCode.RECORD_TOO_LARGE: "A record claims a length above the configured limit (absurd or hostile length field).",
    ReasonCode.UNKNOWN_COMPRESSION: "A chunk uses a compression the reader cannot decode or the vendor contract does not allow.",
    ReasonCode.CONTAINER_ERROR: "The container is malformed: wrong index, summary offsets, statistics, or demuxer errors.",
    ReasonCode.DISALLOWED_CONTAINER: "The container format is not on the allow-list (e.g. a playlist posing as a video).",
    ReasonCode.OUTSIDE_VENDOR_ROOT: "The path or a reference inside the file resolves outside the vendor root.",
    ReasonCode.UNSUPPORTED_ENCODING: "A channel's message encoding (or a video codec) is not allowed by the vendor contract, or a camera's or video's colour matrix is one the transcode can neither keep nor convert (e.g. YCgCo, BT.2020 constant luminance).",
    ReasonCode.MISSING_REQUIRED_TOPIC: "A topic the contract marks required is absent.",
    ReasonCode.NO_MESSAGES: "The log holds no messages although the contract requires topics.",
    ReasonCode.SCHEMA_DRIFT: "A topic's schema differs from the vendor's earlier accepted episodes (a flag), or a stream's entry names (JointState.name) change mid-episode (quarantined).",
    ReasonCode.NO_CALIBRATION: "No calibration's validity window covers the episode.",
    ReasonCode.MISSING_METADATA: "Robot or session id is missing from the episode metadata.",
    ReasonCode.NON_MONOTONIC_TIME: "Log times go backwards on a topic more often than the timestamp policy allows.",
    ReasonCode.DUPLICATE_TIMESTAMPS: "Several messages of a topic share a log time more often than allowed.",
    ReasonCode.CLOCK_JUMP: "Consecutive messages are further apart than the policy's maximum clock jump.",
    ReasonCode.CLOCK_SKEW: "Hardware stamps and log times disagree by more than the allowed skew.",
    ReasonCode.GAP_RATE_HIGH: "More expected messages (e.g. camera frames) are missing than the threshold allows.",
    ReasonCode.DECODE_ERROR: "The decoder reported errors (corrupt bitstream or payloads that do not decode).",
    ReasonCode.NO_VIDEO_STREAM: "The file has no video stream (audio only, or a truncated header).",
    ReasonCode.BLANK_VIDEO: "Nearly all sampled frames are black or flat.",
    ReasonCode.MISSING_LEADING_KEYFRAME: "The first decoded frame is not a keyframe.",
    ReasonCode.TOO_FEW_FRAMES: "Fewer frames decode than the minimum.",
    ReasonCode.ROTATED: "The container asks for a display rotation; transcode applies it.",
    ReasonCode.INTERLACED: "Frames are interlaced; transcode deinterlaces them.",
    ReasonCode.VARIABLE_FRAME_RATE: "Frame intervals vary beyond the tolerance; transcode makes the rate constant.",
    ReasonCode.LETTERBOXED: "Black bars cover part of the picture; transcode crops them.",
    ReasonCode.RESOLUTION_OUT_OF_BOUNDS: "Width or height outside the contract's bounds, or above max_pixels.",
    ReasonCode.FRAME_RATE_OUT_OF_BOUNDS: "The frame rate is outside the contract's bounds.",
    ReasonCode.DURATION_OUT_OF_BOUNDS: "The episode or clip is shorter or longer than the quality thresholds allow.",
    ReasonCode.PROBE_TIMEOUT: "The sandboxed probe did not finish within its wall-clock limit.",
    ReasonCode.PROBE_RESOURCE_LIMIT: "The sandboxed probe hit its memory or resource limit.",
    ReasonCode.NEAR_DUPLICATE: "The same content as another episode (re-chunked or re-encoded).",
    ReasonCode.TRANSCODE_FAILED: "The transcode of this episode failed.",
    ReasonCode.GOP_MISMATCH: "The output's keyframe interval or reference structure is not what the profile asked for.",
    ReasonCode.FRAME_COUNT_MISMATCH: "The output has a different number of frames than the source.",
    ReasonCode.DURATION_MISMATCH: "The output's duration differs from the source beyond the tolerance.",
    ReasonCode.PSNR_BELOW_THRESHOLD: "Sampled output frames differ from the source more than the PSNR threshold allows.",
    ReasonCode.COLOUR_MISMATCH: "The output shows other colours than its source: its pictures name another colour matrix, HDR transfer or full range, their mean chroma is shifted (a cast), or the source's matrix changes mid-stream.",
    ReasonCode.RESAMPLE_ERROR: "Resampled state/actions deviate from the native streams beyond the bound.",
    ReasonCode.ANNOTATOR_FAILED: "An annotator failed on this episode (non-critical: the others' results are kept).",
    ReasonCode.SHARD_VERIFY_FAILED: "A shard did not verify (count, size, sha256 or member index).",
}
