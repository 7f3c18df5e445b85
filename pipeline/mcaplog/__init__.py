"""The one MCAP reader every step uses.

* :func:`probe_structure` — magic at both ends, header, footer, DataEnd and its CRC, summary and indexes,
  which CRCs exist; a few bounded reads.
* :func:`read_log` — one full pass that checks every CRC (chunks, data section, summary, attachments) and
  every index claim on every kind of file, and returns per-topic statistics only if the pass ended cleanly.
* :func:`iter_messages` — messages for later steps, through the chunk index when there is a usable one.
* :func:`decode_message`, :func:`decode_json`, :func:`decode_protobuf` — payloads by encoding.

This module measures and reports findings (:class:`Finding` with a :class:`~pipeline.enums.ReasonCode`);
the quality gate decides states from them and from the raw numbers in :class:`TopicStats`.
"""

from pipeline.mcaplog.decode import (
    DEFAULT_STAMP_FIELDS,
    decode_json,
    decode_message,
    decode_protobuf,
    decode_ros2,
    decoder_for,
    stamp_ns,
    value_at,
)
from pipeline.mcaplog.exceptions import DecodeError, McapInputError, UnsupportedEncodingError
from pipeline.mcaplog.framing import SUPPORTED_COMPRESSIONS
from pipeline.mcaplog.messages import MessageTuple, iter_messages
from pipeline.mcaplog.models import (
    AttachmentInfo,
    ChannelInfo,
    ContentProblem,
    ContentStats,
    CrcCoverage,
    Finding,
    FindingThresholds,
    LogReport,
    MetadataInfo,
    ReadLimits,
    SchemaInfo,
    StatisticsInfo,
    StructureProbe,
    TopicStats,
)
from pipeline.mcaplog.probe import probe_structure
from pipeline.mcaplog.read import ContentProbe, ProbeFactory, read_log

__all__ = [
    "DEFAULT_STAMP_FIELDS",
    "SUPPORTED_COMPRESSIONS",
    "AttachmentInfo",
    "ChannelInfo",
    "ContentProbe",
    "ContentProblem",
    "ContentStats",
    "CrcCoverage",
    "DecodeError",
    "Finding",
    "FindingThresholds",
    "LogReport",
    "McapInputError",
    "MessageTuple",
    "MetadataInfo",
    "ProbeFactory",
    "ReadLimits",
    "SchemaInfo",
    "StatisticsInfo",
    "StructureProbe",
    "TopicStats",
    "UnsupportedEncodingError",
    "decode_json",
    "decode_message",
    "decode_protobuf",
    "decode_ros2",
    "decoder_for",
    "iter_messages",
    "probe_structure",
    "read_log",
    "stamp_ns",
    "value_at",
]
