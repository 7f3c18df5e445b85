"""The message families Sluice reads, as tables: which schema is a camera, state or action stream, where its
frames, vectors and stamps are, and what decodes them.

Everything else (the transcode's source reader, the pre-gate's frame probe, ``sluice vendor init``) asks
these tables; none of them branches on a schema name itself. A family is matched by schema name, whatever
the encoding (ROS 2 CDR, protobuf or JSON): the message is decoded with the schema in the file
(:mod:`pipeline.mcaplog.decode`), and the fields are then read by path the same way from a CDR object, a
protobuf message or a JSON mapping.

Adding a family is adding a row here (and a test with a synthetic episode of it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FrameKind(StrEnum):
    """How a camera family's messages carry pictures."""

    VIDEO = "video"  # inter-coded access units (H.264, H.265): decode order matters
    IMAGE = "image"  # one compressed picture per message (JPEG, PNG): every frame stands alone
    RAW = "raw"  # pixels as they are, with width, height, pixel encoding and row stride


@dataclass(frozen=True)
class CameraFamily:
    """One camera message type: where its picture, format and capture stamp are."""

    name: str
    kind: FrameKind
    schema_names: frozenset[str]
    stamp_field: str  # the type's own capture stamp (what `vendor init` proposes)
    data_field: str = "data"
    format_field: str | None = None  # VIDEO and IMAGE: the payload format ("jpeg", "h264"...)
    # RAW only: the picture's layout
    width_field: str | None = None
    height_field: str | None = None
    encoding_field: str | None = None
    step_field: str | None = None
    bigendian_field: str | None = None


def _names(*names: str) -> frozenset[str]:
    """A schema name as rosbag2 writes it (``pkg/msg/Type``), as older writers do (``pkg/Type``), as is."""
    out = set()
    for name in names:
        out.add(name)
        if "/msg/" in name:
            out.add(name.replace("/msg/", "/"))
    return frozenset(out)


_RAW_FIELDS = {
    "width_field": "width",
    "height_field": "height",
    "encoding_field": "encoding",
    "step_field": "step",
}

CAMERA_FAMILIES: tuple[CameraFamily, ...] = (
    CameraFamily(
        "ros2 CompressedImage",
        FrameKind.IMAGE,
        _names("sensor_msgs/msg/CompressedImage"),
        stamp_field="header.stamp",
        format_field="format",
    ),
    CameraFamily(
        "ros2 Image",
        FrameKind.RAW,
        _names("sensor_msgs/msg/Image"),
        stamp_field="header.stamp",
        bigendian_field="is_bigendian",
        **_RAW_FIELDS,
    ),
    CameraFamily(
        "foxglove CompressedVideo",
        FrameKind.VIDEO,
        _names("foxglove.CompressedVideo", "foxglove_msgs/msg/CompressedVideo"),
        stamp_field="timestamp",
        format_field="format",
    ),
    CameraFamily(
        "foxglove CompressedImage",
        FrameKind.IMAGE,
        _names("foxglove.CompressedImage", "foxglove_msgs/msg/CompressedImage"),
        stamp_field="timestamp",
        format_field="format",
    ),
    CameraFamily(
        "foxglove RawImage",
        FrameKind.RAW,
        _names("foxglove.RawImage", "foxglove_msgs/msg/RawImage"),
        stamp_field="timestamp",
        **_RAW_FIELDS,  # foxglove's RawImage is little-endian by definition
    ),
)

#: Video payload formats -> FFmpeg decoder. Foxglove's CompressedVideo says ``h264`` and ``h265``.
VIDEO_DECODERS: dict[str, str] = {"h264": "h264", "h265": "hevc"}
#: Still-image payload formats -> FFmpeg decoder.
IMAGE_DECODERS: dict[str, str] = {"jpeg": "mjpeg", "png": "png"}
#: Leading bytes of each still-image format: the payload, not the format field, says what it holds.
IMAGE_MAGIC: dict[str, bytes] = {"jpeg": b"\xff\xd8\xff", "png": b"\x89PNG\r\n\x1a\n"}


@dataclass(frozen=True)
class PixelLayout:
    """How FFmpeg names a raw pixel encoding, and its bytes per pixel (the ``step`` check needs them)."""

    pix_fmt: str  # little-endian (or byte-order free) name
    bytes_per_pixel: int
    pix_fmt_big_endian: str | None = None  # for 16-bit samples with is_bigendian set


#: ROS ``sensor_msgs/image_encodings`` names (Foxglove's RawImage uses the same) -> FFmpeg pixel formats.
#: ROS's ``yuv422`` is UYVY byte order; ``yuv422_yuy2`` and ``yuyv`` are YUYV. Depth and float encodings
#: (``16UC1`` as depth, ``32FC1``) are not pictures a video encoder takes, so they are not here.
PIXEL_ENCODINGS: dict[str, PixelLayout] = {
    "rgb8": PixelLayout("rgb24", 3),
    "bgr8": PixelLayout("bgr24", 3),
    "rgba8": PixelLayout("rgba", 4),
    "bgra8": PixelLayout("bgra", 4),
    "mono8": PixelLayout("gray", 1),
    "8uc1": PixelLayout("gray", 1),
    "mono16": PixelLayout("gray16le", 2, "gray16be"),
    "rgb16": PixelLayout("rgb48le", 6, "rgb48be"),
    "bgr16": PixelLayout("bgr48le", 6, "bgr48be"),
    "yuv422": PixelLayout("uyvy422", 2),
    "uyvy": PixelLayout("uyvy422", 2),
    "yuyv": PixelLayout("yuyv422", 2),
    "yuv422_yuy2": PixelLayout("yuyv422", 2),
    **{f"bayer_{p}8": PixelLayout(f"bayer_{p}8", 1) for p in ("rggb", "bggr", "gbrg", "grbg")},
    **{
        f"bayer_{p}16": PixelLayout(f"bayer_{p}16le", 2, f"bayer_{p}16be")
        for p in ("rggb", "bggr", "gbrg", "grbg")
    },
}


@dataclass(frozen=True)
class FieldPick:
    """One output field of a series: the value at ``paths[0]`` (a number or a list of numbers), or, with
    several paths, the vector of the scalars at each (``pose.position.x``, ``.y``, ``.z``)."""

    name: str
    paths: tuple[str, ...]


def _xyz(name: str, prefix: str, axes: str = "xyz") -> FieldPick:
    return FieldPick(name, tuple(f"{prefix}.{a}" for a in axes))


@dataclass(frozen=True)
class SeriesFamily:
    """One state or action message type: its stamp, and the numeric fields a resampled record keeps.

    ``names_field``: a field naming the entries of every vector (``JointState.name``): vectors are then
    keyed by name, put in the first message's name order, and a name set that changes mid-episode is
    ``schema_drift``.
    """

    name: str
    schema_names: frozenset[str]
    stamp_field: str | None  # None: the type carries no stamp (log time is used)
    fields: tuple[FieldPick, ...]
    names_field: str | None = None


_MULTIARRAY = tuple(
    f"std_msgs/msg/{t}MultiArray"
    for t in ("Float64", "Float32", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64")
)
_POSE = (_xyz("position", "position"), _xyz("orientation", "orientation", "xyzw"))
_TWIST = (_xyz("linear", "linear"), _xyz("angular", "angular"))
_WRENCH = (_xyz("force", "force"), _xyz("torque", "torque"))


def _nested(picks: tuple[FieldPick, ...], under: str) -> tuple[FieldPick, ...]:
    return tuple(FieldPick(p.name, tuple(f"{under}.{path}" for path in p.paths)) for p in picks)


SERIES_FAMILIES: tuple[SeriesFamily, ...] = (
    SeriesFamily(
        "ros2 JointState",
        _names("sensor_msgs/msg/JointState"),
        stamp_field="header.stamp",
        fields=(
            FieldPick("position", ("position",)),
            FieldPick("velocity", ("velocity",)),
            FieldPick("effort", ("effort",)),
        ),
        names_field="name",
    ),
    SeriesFamily("ros2 MultiArray", _names(*_MULTIARRAY), None, (FieldPick("data", ("data",)),)),
    SeriesFamily("ros2 Pose", _names("geometry_msgs/msg/Pose"), None, _POSE),
    SeriesFamily(
        "ros2 PoseStamped", _names("geometry_msgs/msg/PoseStamped"), "header.stamp", _nested(_POSE, "pose")
    ),
    SeriesFamily("ros2 Twist", _names("geometry_msgs/msg/Twist"), None, _TWIST),
    SeriesFamily(
        "ros2 TwistStamped",
        _names("geometry_msgs/msg/TwistStamped"),
        "header.stamp",
        _nested(_TWIST, "twist"),
    ),
    SeriesFamily("ros2 Wrench", _names("geometry_msgs/msg/Wrench"), None, _WRENCH),
    SeriesFamily(
        "ros2 WrenchStamped",
        _names("geometry_msgs/msg/WrenchStamped"),
        "header.stamp",
        _nested(_WRENCH, "wrench"),
    ),
)

#: Field names that hold a capture stamp when a type is not in the tables (tried in order, as the
#: pre-gate's stamp reader does).
STAMP_FIELD_GUESSES: tuple[str, ...] = ("header.stamp", "timestamp", "stamp_ns", "stamp")


def camera_family(schema_name: str | None) -> CameraFamily | None:
    """The camera family of a schema, or None when the schema is not a camera type we know."""
    return _CAMERAS_BY_NAME.get(schema_name or "")


def series_family(schema_name: str | None) -> SeriesFamily | None:
    """The state/action family of a schema, or None (then fields are picked by path or taken whole)."""
    return _SERIES_BY_NAME.get(schema_name or "")


def pixel_layout(encoding: str) -> PixelLayout | None:
    """The FFmpeg layout of a raw pixel encoding (case-insensitive), or None when we cannot take it."""
    return PIXEL_ENCODINGS.get(encoding.strip().lower())


def image_format(format_text: str) -> str | None:
    """The still-image format a CompressedImage ``format`` names, or None.

    ROS's image_transport writes ``jpeg`` or ``png`` alone, or ``rgb8; jpeg compressed bgr8``; Foxglove
    writes ``jpeg``, ``png``, ``webp``...
    """
    text = format_text.strip().lower()
    for word in text.replace(";", " ").split():
        if word in ("jpeg", "jpg"):
            return "jpeg"
        if word == "png":
            return "png"
    return None


def video_format(format_text: str) -> str | None:
    """The video format a CompressedVideo ``format`` names (``h264``, ``h265``; ``hevc`` is h265)."""
    text = format_text.strip().lower()
    text = "h265" if text == "hevc" else text
    return text if text in VIDEO_DECODERS else None


_CAMERAS_BY_NAME = {name: f for f in CAMERA_FAMILIES for name in f.schema_names}
_SERIES_BY_NAME = {name: f for f in SERIES_FAMILIES for name in f.schema_names}
