"""The message families Sluice reads (ROS 2, Foxglove and JSON cameras, state and actions): one table of
types (:mod:`~pipeline.families.table`) and the code that reads any of them by that table: pictures
(:mod:`~pipeline.families.frames`), numeric vectors (:mod:`~pipeline.families.series`) and the pre-gate's
content probes (:mod:`~pipeline.families.probe`). The gates, the transcode and ``sluice vendor init`` ask
these; none of them branches on a schema name itself.
"""

from pipeline.families.errors import MessageFamilyError
from pipeline.families.frames import (
    CameraFrames,
    FrameDecoder,
    FramePayload,
    RawLayout,
    decode_payloads,
    raw_frame,
    read_payload,
    stream_payloads,
)
from pipeline.families.series import SeriesReader, numeric_fields
from pipeline.families.table import (
    CAMERA_FAMILIES,
    IMAGE_DECODERS,
    PIXEL_ENCODINGS,
    SERIES_FAMILIES,
    VIDEO_DECODERS,
    CameraFamily,
    FieldPick,
    FrameKind,
    PixelLayout,
    SeriesFamily,
    camera_family,
    pixel_layout,
    series_family,
)

__all__ = [
    "CAMERA_FAMILIES",
    "IMAGE_DECODERS",
    "PIXEL_ENCODINGS",
    "SERIES_FAMILIES",
    "VIDEO_DECODERS",
    "CameraFamily",
    "CameraFrames",
    "FieldPick",
    "FrameDecoder",
    "FrameKind",
    "FramePayload",
    "MessageFamilyError",
    "PixelLayout",
    "RawLayout",
    "SeriesFamily",
    "SeriesReader",
    "camera_family",
    "decode_payloads",
    "numeric_fields",
    "pixel_layout",
    "raw_frame",
    "read_payload",
    "series_family",
    "stream_payloads",
]
