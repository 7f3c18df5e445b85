"""What a vendor delivers and how its inputs are judged: source, topic or video contract, timestamps,
calibration, ingest limits and quality thresholds.

These sections are read by discovery, ingest and the two quality gates. Every number has a unit in its name
and a comment saying why the default is what it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Literal
from urllib.parse import urlsplit

import fsspec
from pydantic import ByteSize, Field, JsonValue, field_validator, model_validator

from pipeline.config.controls import controls
from pipeline.config.types import (
    FileName,
    FrozenModel,
    Glob,
    Lax,
    Loc,
    PositiveBytes,
    Slug,
    SortedSet,
    VendorPath,
    format_loc,
    raise_problems,
)
from pipeline.enums import Gate
from pipeline.enums import ReasonCode as R

PRE = Gate.PRE

#: Message encodings of the MCAP well-known registry (what a real robot log can carry).
MessageEncoding = Literal["ros1", "cdr", "protobuf", "flatbuffer", "cbor", "msgpack", "json"]
#: Schema encodings of the MCAP well-known registry; ``none`` is MCAP's empty string (self-describing data).
SchemaEncoding = Literal[
    "none", "protobuf", "flatbuffer", "ros1msg", "ros2msg", "ros2idl", "omgidl", "jsonschema"
]
#: Chunk compressions; ``none`` is MCAP's empty string.
Compression = Literal["none", "lz4", "zstd"]
#: Camera payload formats: video (``CompressedVideo``) and still images (``CompressedImage``).
VideoFormat = Literal["h264", "h265", "vp9", "av1", "jpeg", "png"]
#: Raw pixel encodings (``sensor_msgs/Image``, ``foxglove.RawImage``) the transcode decodes; ROS's names.
PixelEncoding = Literal[
    "rgb8", "bgr8", "rgba8", "bgra8", "mono8", "8uc1", "mono16", "rgb16", "bgr16", "yuv422", "uyvy", "yuyv",
    "yuv422_yuy2", "bayer_rggb8", "bayer_bggr8", "bayer_gbrg8", "bayer_grbg8", "bayer_rggb16",
    "bayer_bggr16", "bayer_gbrg16", "bayer_grbg16",
]  # fmt: skip
#: Containers a video vendor may deliver (FFmpeg's demuxer for mp4/mov is the same: ``mov,mp4,m4a,...``).
Container = Literal["mp4", "mov", "mkv", "webm", "avi", "mpegts"]
#: Video codecs a video vendor may deliver (FFmpeg codec names).
VideoCodec = Literal["h264", "hevc", "vp9", "av1", "mpeg4", "mjpeg"]


class StampSource(StrEnum):
    """Which clock is the truth for an episode's timeline."""

    HARDWARE = "hardware"  # the capture stamp inside the payload (``stamp_field``)
    LOG_TIME = "log_time"  # MCAP log_time (recorder clock, includes transport delay)
    PUBLISH_TIME = "publish_time"  # MCAP publish_time
    CONTAINER = "container"  # presentation timestamps of a video container


#: ``storage_options`` keys (at any depth, case and ``-``/``_`` ignored) that hold credentials in the fsspec
#: backends we know (s3fs, gcsfs, adlfs, HTTP headers, SFTP): a vendor file is stored whole in the catalog,
#: where the read-only curation role reads it, so secrets come from the environment instead.
CREDENTIAL_KEYS = frozenset(
    {
        "key", "secret", "token", "password", "passwd", "passphrase", "sessiontoken",
        "awsaccesskeyid", "awssecretaccesskey", "awssessiontoken", "accountkey", "sastoken",
        "connectionstring", "clientsecret", "privatekey", "authorization", "credentials", "apikey",
        "accesskey", "secretkey", "credential",
    }
)  # fmt: skip
#: gcsfs takes ``token`` as the name of a way to authenticate as well; those names are no secret.
_TOKEN_METHODS = frozenset({"anon", "google_default", "cloud", "browser"})


def credential_paths(options: JsonValue, at: str = "storage_options") -> list[str]:
    """Key paths under ``options`` whose key names a credential (see :data:`CREDENTIAL_KEYS`)."""
    found = []
    if isinstance(options, dict):
        for key, value in options.items():
            path = f"{at}.{key}"
            normal = str(key).lower().replace("-", "").replace("_", "")
            method = normal == "token" and isinstance(value, str) and value in _TOKEN_METHODS
            if normal in CREDENTIAL_KEYS and value not in (None, "") and not method:
                found.append(path)
            else:
                found += credential_paths(value, path)
    elif isinstance(options, list):
        for i, value in enumerate(options):
            found += credential_paths(value, f"{at}[{i}]")
    return found


class SourceConfig(FrozenModel):
    """Where a vendor's drop lives and which files in it are inputs."""

    url: str = Field(
        min_length=1,
        description=(
            "fsspec URL (s3://bucket/prefix, file:///abs/dir) or a local path. A relative local path is "
            "resolved against the project root: the working directory of the sluice process (like "
            "SLUICE_HOME), "
            "or the base_dir the caller passes."
        ),
    )
    storage_options: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="fsspec filesystem keyword arguments. Keep secrets out: pass them via the environment.",
    )
    include: Annotated[tuple[Glob, ...], SortedSet, Lax] = Field(
        default=(), description="Input globs, relative to the source root; the default depends on kind."
    )
    exclude: Annotated[tuple[Glob, ...], SortedSet, Lax] = Field(
        # Hidden files and the usual partial-upload suffixes are never inputs.
        default=("**/*.part", "**/*.tmp", "**/.*"),
        description="Globs of files to skip even if included.",
    )
    ready_marker: FileName | None = Field(
        default=None,
        description="If set, a folder's files are inputs only once this file (e.g. _READY) is beside them.",
    )
    settle_s: float = Field(
        # Two looks this far apart must see the same size and mtime: long enough to catch a slow upload
        # between polls, short enough that discovery does not stall a run.
        default=10.0,
        ge=0,
        description="A file is complete when size and mtime are unchanged over this interval.",
    )

    @field_validator("storage_options")
    @classmethod
    def _no_credentials(cls, options: dict[str, JsonValue]) -> dict[str, JsonValue]:
        found = credential_paths(options)
        if found:
            raise ValueError(
                f"{', '.join(found)} hold(s) a credential: a vendor file is kept whole in the catalog "
                "(vendors.config), which the read-only curation role can read. Give credentials through "
                "the environment (e.g. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
                "GOOGLE_APPLICATION_CREDENTIALS) or the backend's own config file"
            )
        return options

    @field_validator("url")
    @classmethod
    def _known_protocol(cls, url: str) -> str:
        if urlsplit(url).password:
            raise ValueError(
                "the URL holds a password (user:password@host): a vendor file is kept whole in the "
                "catalog; give credentials through the environment"
            )
        if "::" in url:
            raise ValueError(f"chained fsspec URL {url!r} is not supported: give one protocol")
        protocol, rest = fsspec.core.split_protocol(url)
        if protocol is not None and protocol not in fsspec.available_protocols():
            known = ", ".join(sorted(fsspec.available_protocols()))
            raise ValueError(f"unknown fsspec protocol {protocol!r}; known: {known}")
        scheme, colon, after = url.partition(":")
        if protocol is None and colon and scheme in fsspec.available_protocols() and len(scheme) > 1:
            # "s3:/bucket" is not read as a URL but as a local folder named "s3:" (one letter is a drive)
            raise ValueError(f"{url!r} is not a URL: write {scheme}://{after.lstrip('/')}")
        if protocol not in (None, "file", "local", "memory") and not rest.strip("/"):
            raise ValueError(f"{url!r} names no bucket or host: write {protocol}://BUCKET/PREFIX")
        return url

    @property
    def protocol(self) -> str:
        """The fsspec protocol, ``file`` for a local path."""
        protocol, _ = fsspec.core.split_protocol(self.url)
        return "file" if protocol in (None, "local") else protocol

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"


class TopicSpec(FrozenModel):
    """One topic of the contract."""

    topic: str = Field(min_length=1, description="MCAP topic name, e.g. /robot/joint_states.")
    rate_hz: float = Field(
        gt=0,
        le=100_000,
        description="Expected message rate; gap rate is measured against it.",
        json_schema_extra=controls((PRE, "max_gap_rate", R.GAP_RATE_HIGH)),
    )
    required: bool = Field(
        default=True,
        description="A file without this topic is quarantined.",
        json_schema_extra=controls((PRE, "required_topics", R.MISSING_REQUIRED_TOPIC)),
    )
    message_encodings: Annotated[tuple[MessageEncoding, ...], SortedSet, Lax] = Field(
        min_length=1,
        description="Message encodings allowed on this topic.",
        json_schema_extra=controls((PRE, "topic_contract", R.UNSUPPORTED_ENCODING)),
    )
    schema_names: Annotated[tuple[str, ...], SortedSet, Lax] = Field(
        default=(),
        description="Schema names allowed on this topic; empty = any.",
        json_schema_extra=controls((PRE, "topic_contract", R.UNSUPPORTED_ENCODING)),
    )
    stamp_field: str | None = Field(
        default=None,
        description=(
            "Payload field with the hardware capture stamp: an integer of ns (stamp_ns), a time (protobuf "
            "timestamp, ROS header.stamp as sec + nanosec) at any dotted path; none = the type has no stamp "
            "(its log time is used)."
        ),
    )


class CameraSpec(TopicSpec):
    """A camera topic: ``foxglove.CompressedVideo`` (H.264, H.265), ``sensor_msgs/CompressedImage`` or
    ``foxglove.CompressedImage`` (JPEG, PNG), ``sensor_msgs/Image`` or ``foxglove.RawImage`` (raw pixels),
    in CDR, protobuf or JSON."""

    name: Slug = Field(description="Camera name (the frame_id), used for output topics and folders.")
    formats: Annotated[tuple[VideoFormat, ...], SortedSet, Lax] = Field(
        default=("h264",),
        min_length=1,
        description="Allowed payload formats of compressed pictures (video or still images).",
        json_schema_extra=controls((PRE, "camera_format", R.UNSUPPORTED_ENCODING)),
    )
    pixel_encodings: Annotated[tuple[PixelEncoding, ...], SortedSet, Lax] = Field(
        default=(),
        description="Allowed raw pixel encodings (Image, RawImage); empty = any the transcode decodes.",
        json_schema_extra=controls((PRE, "camera_format", R.UNSUPPORTED_ENCODING)),
    )
    width_px: int | None = Field(
        default=None,
        ge=1,
        description="Expected picture width; none = any, but the same for the whole stream.",
        json_schema_extra=controls((PRE, "camera_size", R.RESOLUTION_OUT_OF_BOUNDS)),
    )
    height_px: int | None = Field(
        default=None,
        ge=1,
        description="Expected picture height; none = any, but the same for the whole stream.",
        json_schema_extra=controls((PRE, "camera_size", R.RESOLUTION_OUT_OF_BOUNDS)),
    )


class SeriesSpec(TopicSpec):
    """A state or action topic: its messages become numeric vectors that are resampled onto one grid."""

    fields: Annotated[tuple[str, ...], Lax] = Field(
        default=(),
        description=(
            "Numeric fields to keep, as dotted paths (a number or an array of numbers each); empty = the "
            "type's own (JointState position/velocity/effort by joint name, MultiArray data, pose and "
            "twist vectors), a JSON message's whole object, or every numeric field of any other type."
        ),
        json_schema_extra=controls((PRE, "series_content", R.SCHEMA_DRIFT)),
    )


class TopicContract(FrozenModel):
    """Robot-log (``kind: mcap``) contract: which topics are cameras, state and actions.

    An empty contract (``topics: {}``) lists no topic and so requires none: a container-only profile that
    checks structure, compressions and encodings. With ``message_encodings: null`` any encoding passes.
    """

    cameras: Annotated[tuple[CameraSpec, ...], Lax] = Field(default=(), description="Camera topics.")
    state: Annotated[tuple[SeriesSpec, ...], Lax] = Field(
        default=(), description="Proprioception topics (joint states...)."
    )
    actions: Annotated[tuple[SeriesSpec, ...], Lax] = Field(
        default=(), description="Commanded-action topics."
    )
    message_encodings: Annotated[tuple[MessageEncoding, ...], SortedSet, Lax] | None = Field(
        default=("cbor", "cdr", "flatbuffer", "json", "msgpack", "protobuf", "ros1"),
        min_length=1,
        description="Encodings allowed on any channel, listed or not; others are quarantined. null = any.",
        json_schema_extra=controls((PRE, "allowed_message_encodings", R.UNSUPPORTED_ENCODING)),
    )
    schema_encodings: Annotated[tuple[SchemaEncoding, ...], SortedSet, Lax] | None = Field(
        default=("flatbuffer", "jsonschema", "none", "omgidl", "protobuf", "ros1msg", "ros2idl", "ros2msg"),
        min_length=1,
        description="Schema encodings allowed on any schema of a file. null = any.",
        json_schema_extra=controls((PRE, "allowed_schema_encodings", R.UNSUPPORTED_ENCODING)),
    )
    compressions: Annotated[tuple[Compression, ...], SortedSet, Lax] = Field(
        default=("lz4", "none", "zstd"),
        min_length=1,
        description="Chunk compressions allowed.",
        json_schema_extra=controls((PRE, "mcap.unknown_compression", R.UNKNOWN_COMPRESSION)),
    )

    @model_validator(mode="after")
    def _consistent(self) -> TopicContract:
        problems: list[tuple[Loc, str]] = []
        seen: dict[str, Loc] = {}
        for role in ("cameras", "state", "actions"):
            specs: tuple[TopicSpec, ...] = getattr(self, role)
            for index, spec in enumerate(specs):
                here: Loc = (role, index, "topic")
                if spec.topic in seen:
                    problems.append(
                        (here, f"topic {spec.topic!r} is already listed at {format_loc(seen[spec.topic])}")
                    )
                seen.setdefault(spec.topic, here)
                allowed = self.message_encodings
                extra = sorted(set(spec.message_encodings) - set(allowed)) if allowed is not None else []
                if extra and allowed is not None:
                    problems.append(
                        (
                            (role, index, "message_encodings"),
                            f"{', '.join(extra)} not in the contract's message_encodings "
                            f"({', '.join(allowed)})",
                        )
                    )
        names = [camera.name for camera in self.cameras]
        for index, name in enumerate(names):
            if names.index(name) != index:
                problems.append((("cameras", index, "name"), f"camera name {name!r} is used twice"))
        raise_problems(problems)
        return self

    def all_topics(self) -> tuple[TopicSpec, ...]:
        """Every topic of the contract, cameras first."""
        return (*self.cameras, *self.state, *self.actions)


class VideoContract(FrozenModel):
    """Video-vendor (``kind: video``) contract."""

    containers: Annotated[tuple[Container, ...], SortedSet, Lax] = Field(
        default=("mov", "mp4"),
        min_length=1,
        description="Allowed containers.",
        json_schema_extra=controls((PRE, "video.disallowed_container", R.DISALLOWED_CONTAINER)),
    )
    codecs: Annotated[tuple[VideoCodec, ...], SortedSet, Lax] = Field(
        default=("h264", "hevc"),
        min_length=1,
        description="Allowed video codecs; others are quarantined undecoded.",
        json_schema_extra=controls(
            (PRE, "allowed_codecs", R.UNSUPPORTED_ENCODING),
            (PRE, "video.unsupported_encoding", R.UNSUPPORTED_ENCODING),
        ),
    )
    # 320x240 is the smallest frame a policy input is still cut from; 7680x4320 (8K) bounds the decoder's
    # frame buffers, so the probe refuses decompression bombs before decoding them.
    min_width_px: int = Field(
        default=320,
        ge=1,
        description="Narrower videos are quarantined.",
        json_schema_extra=controls((PRE, "width_bounds", R.RESOLUTION_OUT_OF_BOUNDS)),
    )
    min_height_px: int = Field(
        default=240,
        ge=1,
        description="Shorter videos are quarantined.",
        json_schema_extra=controls((PRE, "height_bounds", R.RESOLUTION_OUT_OF_BOUNDS)),
    )
    # max_width_px x max_height_px is also the probe's max_pixels: larger frames are refused undecoded.
    max_width_px: int = Field(
        default=7680,
        ge=1,
        description="Wider videos are quarantined unprobed.",
        json_schema_extra=controls(
            (PRE, "width_bounds", R.RESOLUTION_OUT_OF_BOUNDS),
            (PRE, "video.resolution_out_of_bounds", R.RESOLUTION_OUT_OF_BOUNDS),
        ),
    )
    max_height_px: int = Field(
        default=4320,
        ge=1,
        description="Taller videos are quarantined unprobed.",
        json_schema_extra=controls(
            (PRE, "height_bounds", R.RESOLUTION_OUT_OF_BOUNDS),
            (PRE, "video.resolution_out_of_bounds", R.RESOLUTION_OUT_OF_BOUNDS),
        ),
    )
    min_fps: float = Field(
        default=5.0,
        gt=0,
        description="Below this the clip is not useful motion.",
        json_schema_extra=controls((PRE, "fps_bounds", R.FRAME_RATE_OUT_OF_BOUNDS)),
    )
    max_fps: float = Field(
        default=240.0,
        gt=0,
        description="High-speed cameras above this are refused.",
        json_schema_extra=controls((PRE, "fps_bounds", R.FRAME_RATE_OUT_OF_BOUNDS)),
    )
    sidecar_suffix: str | None = Field(
        default=".json",
        description="Per-clip JSON sidecar beside each clip (clip.mp4 → clip.json); none = no sidecars.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> VideoContract:
        problems: list[tuple[Loc, str]] = []
        if self.min_width_px > self.max_width_px:
            problems.append((("min_width_px",), f"{self.min_width_px} > max_width_px {self.max_width_px}"))
        if self.min_height_px > self.max_height_px:
            problems.append(
                (("min_height_px",), f"{self.min_height_px} > max_height_px {self.max_height_px}")
            )
        if self.min_fps > self.max_fps:
            problems.append((("min_fps",), f"{self.min_fps} > max_fps {self.max_fps}"))
        suffix = self.sidecar_suffix
        if suffix is not None and (not suffix.startswith(".") or "/" in suffix or suffix in {".", ".."}):
            problems.append((("sidecar_suffix",), f"{suffix!r} must be a file suffix such as '.json'"))
        raise_problems(problems)
        return self

    @property
    def max_pixels(self) -> int:
        """Largest frame the probe accepts (width × height bounds)."""
        return self.max_width_px * self.max_height_px


class TimestampPolicy(FrozenModel):
    """How much timing disorder an input may have before it is flagged or quarantined."""

    truth: Annotated[StampSource, Lax] = Field(
        default=StampSource.HARDWARE,
        description=(
            "The episode timeline's stamp: hardware, log_time, publish_time (mcap) or container (video)."
        ),
    )
    # A recorder that pauses or an NTP step shows as a jump; 1 s is far above any expected message period
    # (the slowest contract topic, 30 Hz cameras, has 33 ms) yet catches clock steps.
    max_clock_jump_s: float = Field(
        default=1.0,
        gt=0,
        description="Larger forward/backward jumps → clock_jump.",
        json_schema_extra=controls((PRE, "max_clock_jump", R.CLOCK_JUMP)),
    )
    # The synthetic transport delay is a few ms; 50 ms of hardware-vs-log skew means a clock is off.
    max_skew_s: float = Field(
        default=0.05,
        ge=0,
        description="Largest hardware-stamp vs log-time difference.",
        json_schema_extra=controls((PRE, "max_clock_skew", R.CLOCK_SKEW)),
    )
    max_backward_steps: int = Field(
        default=0,
        ge=0,
        description="Backward log-time steps tolerated per topic.",
        json_schema_extra=controls((PRE, "max_backward_steps", R.NON_MONOTONIC_TIME)),
    )
    max_duplicate_timestamps: int = Field(
        default=0,
        ge=0,
        description="Repeated log times tolerated per topic.",
        json_schema_extra=controls((PRE, "max_duplicate_timestamps", R.DUPLICATE_TIMESTAMPS)),
    )


class CalibrationSource(FrozenModel):
    """Where camera calibration comes from; both may be given, ``prefer`` breaks the tie."""

    sidecar_path: VendorPath | None = Field(
        default=None,
        description="JSON file inside the vendor root with calibrations and their validity windows.",
        json_schema_extra=controls((PRE, "calibration_valid", R.NO_CALIBRATION)),
    )
    topics: Annotated[tuple[str, ...], SortedSet, Lax] = Field(
        default=(),
        description="Calibration topics inside each log (foxglove.CameraCalibration).",
        json_schema_extra=controls((PRE, "calibration_valid", R.NO_CALIBRATION)),
    )
    prefer: Literal["sidecar", "topics"] = Field(
        default="sidecar", description="Which source wins when both cover."
    )

    @property
    def enabled(self) -> bool:
        return self.sidecar_path is not None or bool(self.topics)


#: The ids an episode's ``episode`` metadata record may carry, and which the catalog keeps.
EPISODE_ID_KEYS: tuple[str, ...] = ("robot_id", "session_id", "episode_id", "task")


class EpisodeMetadataSource(FrozenModel):
    """Where an episode's ids (robot, session, episode, task) come from besides its log's ``episode``
    metadata record. rosbag2 never writes one: a ROS 2 fleet keeps the robot and session in its folder
    layout (``robot_07/2026-05-01-10-00-00/..._0.mcap``). The record wins; the path fills in what it lacks;
    ``values`` fills in what neither gives."""

    path_pattern: str | None = Field(
        default=None,
        description=(
            "Regular expression searched in each file's path relative to the vendor root; its named groups "
            "(robot_id, session_id, episode_id, task) give the ids the log's 'episode' record lacks."
        ),
    )
    values: dict[str, str] = Field(
        default_factory=dict,
        description="Fixed ids for every episode of the vendor (a one-robot vendor's robot_id).",
    )

    @field_validator("path_pattern")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is None:
            return None
        try:
            groups = set(re.compile(pattern).groupindex)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        unknown = groups - set(EPISODE_ID_KEYS)
        if unknown or not groups:
            raise ValueError(
                f"named groups must be among {', '.join(EPISODE_ID_KEYS)}"
                + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "; it names none")
            )
        return pattern

    @field_validator("values")
    @classmethod
    def _known_keys(cls, values: dict[str, str]) -> dict[str, str]:
        unknown = set(values) - set(EPISODE_ID_KEYS)
        if unknown:
            raise ValueError(
                f"keys must be among {', '.join(EPISODE_ID_KEYS)}; unknown: {', '.join(sorted(unknown))}"
            )
        if any(not v.strip() for v in values.values()):
            raise ValueError("an id must not be empty")
        return values

    def resolve(self, record: Mapping[str, str], relative_path: str | None) -> dict[str, str]:
        """The episode's ids: the record's non-empty values, then the path's groups, then ``values``."""
        out = dict(self.values)
        if self.path_pattern is not None and relative_path is not None:
            found = re.search(self.path_pattern, relative_path)
            if found is not None:
                out |= {k: v for k, v in found.groupdict().items() if v}
        out |= {k: v for k, v in record.items() if v}
        return out


class IngestOptions(FrozenModel):
    """Limits of landing and probing (ingest); they bound what a hostile file can make the probe do."""

    # A 4K H.264 keyframe is a few MiB; a record claiming more than 64 MiB is corrupt or hostile.
    max_record_bytes: PositiveBytes = Field(
        default=ByteSize(64 * 2**20),
        description="Largest MCAP record read.",
        json_schema_extra=controls((PRE, "mcap.record_too_large", R.RECORD_TOO_LARGE)),
    )
    # Probing a one-hour 1080p clip takes well under a minute on one core; two minutes means a stuck decoder.
    probe_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="Wall-clock limit of a video probe subprocess.",
        json_schema_extra=controls((PRE, "video.probe_timeout", R.PROBE_TIMEOUT)),
    )
    # Decoding 8K frames with a few references fits in 2 GiB; more means a decompression bomb.
    probe_memory_bytes: PositiveBytes = Field(
        default=ByteSize(2 * 2**30),
        description="Address-space limit of a probe.",
        json_schema_extra=controls((PRE, "video.probe_resource_limit", R.PROBE_RESOURCE_LIMIT)),
    )
    verify_after_copy: bool = Field(
        default=True, description="Re-read and re-hash a landed object before publishing."
    )


class QualityPre(FrozenModel):
    """Thresholds of the pre-gate (over probe results)."""

    # 2 % missing frames is visible as stutter in a 30 Hz camera; fewer is transport noise.
    max_gap_rate: float = Field(
        default=0.02,
        ge=0,
        le=1,
        description="Largest fraction of expected messages missing.",
        json_schema_extra=controls((PRE, "max_gap_rate", R.GAP_RATE_HIGH)),
    )
    # One second at 30 Hz: shorter episodes cannot give a training window.
    min_frames: int = Field(
        default=30,
        ge=1,
        description="Fewer decoded frames per camera/clip → too_few_frames.",
        json_schema_extra=controls(
            (PRE, "min_camera_frames", R.TOO_FEW_FRAMES),
            (PRE, "min_frames", R.TOO_FEW_FRAMES),
            (PRE, "video.too_few_frames", R.TOO_FEW_FRAMES),
        ),
    )
    min_duration_s: float = Field(
        default=1.0,
        ge=0,
        description="Shorter episodes/clips are quarantined.",
        json_schema_extra=controls((PRE, "duration_bounds", R.DURATION_OUT_OF_BOUNDS)),
    )
    # Two hours: longer inputs are almost always a recorder left running.
    max_duration_s: float = Field(
        default=7200.0,
        gt=0,
        description="Longer episodes/clips are quarantined.",
        json_schema_extra=controls((PRE, "duration_bounds", R.DURATION_OUT_OF_BOUNDS)),
    )
    # A blank frame is a near-constant one at any brightness (black, a test-card colour, a lens cap): sensor
    # noise on real content keeps the luma stddev far above 4.
    blank_luma_stddev_max: float = Field(
        default=4.0,
        ge=0,
        le=255,
        description="A sampled frame whose luma stddev is at most this is blank.",
        json_schema_extra=controls((PRE, "video.blank_video", R.BLANK_VIDEO)),
    )
    max_blank_fraction: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description="More blank sampled frames → blank_video.",
        json_schema_extra=controls((PRE, "video.blank_video", R.BLANK_VIDEO)),
    )
    # Bars under 4 % of the height are overscan noise, not letterboxing.
    letterbox_min_fraction: float = Field(
        default=0.04,
        ge=0,
        le=1,
        description="Black-bar fraction flagged.",
        json_schema_extra=controls((PRE, "video.letterboxed", R.LETTERBOXED)),
    )
    # A frame interval more than 20 % off a whole multiple of the median interval counts as a rate change:
    # that lets millisecond time bases (33/34 ms at 30 fps) and 1001/1000 rounding through.
    # A tenth of a camera's still images decoded in full finds a camera that sends bad pictures at a
    # tenth of the decode's cost; every picture's structure (JPEG markers, PNG CRCs) is checked anyway.
    decode_every_frames: int = Field(
        default=10,
        ge=1,
        description="Every n-th still image of a camera is decoded in full at the pre-gate.",
        json_schema_extra=controls((PRE, "camera_decode", R.DECODE_ERROR)),
    )
    vfr_tolerance_fraction: float = Field(
        default=0.2,
        gt=0,
        description="Relative frame-interval deviation that counts as a rate change.",
        json_schema_extra=controls((PRE, "video.variable_frame_rate", R.VARIABLE_FRAME_RATE)),
    )

    @model_validator(mode="after")
    def _duration_bounds_ordered(self) -> QualityPre:
        if self.min_duration_s > self.max_duration_s:
            raise ValueError(
                f"min_duration_s {self.min_duration_s:g} is above max_duration_s {self.max_duration_s:g}: "
                "no input could pass"
            )
        return self


class QualityPost(FrozenModel):
    """Thresholds of the post-gate (over transcoded outputs)."""

    # CRF 23 / QP 26 give 34-37 dB on grainy 720p (MEASURED.md); 30 dB fails only a broken encode.
    min_psnr_db: float = Field(
        default=30.0,
        ge=0,
        description="Lowest PSNR of sampled frames against the source.",
        json_schema_extra=controls((Gate.POST, "psnr", R.PSNR_BELOW_THRESHOLD)),
    )
    psnr_sample_frames: int = Field(default=8, ge=1, description="Frames per camera compared for PSNR.")
    # An encode moves a picture's mean Cb or Cr by at most 0.93 levels (every camera family, profile and
    # scaling measured, on the procedural scene and real footage: docs/episodes.md); a cast a viewer sees
    # moves it by several.
    max_chroma_shift_levels: float = Field(
        default=2.0,
        ge=0,
        description="Largest shift of a sampled frame's mean Cb or Cr against the source's (8-bit levels).",
        json_schema_extra=controls((Gate.POST, "colour", R.COLOUR_MISMATCH)),
    )
    frame_count_tolerance_frames: int = Field(
        default=0,
        ge=0,
        description="Frames the output may lack.",
        json_schema_extra=controls((Gate.POST, "frame_count", R.FRAME_COUNT_MISMATCH)),
    )
    # Two frames at 30 fps: container rounding, not lost content.
    duration_tolerance_s: float = Field(
        default=0.07,
        ge=0,
        description="Allowed output vs source duration gap.",
        json_schema_extra=controls((Gate.POST, "duration", R.DURATION_MISMATCH)),
    )
    max_resample_rmse: float = Field(
        default=0.01,
        ge=0,
        description="RMS error of resampled state/actions, in each field's own units.",
        json_schema_extra=controls((Gate.POST, "resample", R.RESAMPLE_ERROR)),
    )


class QualityThresholds(FrozenModel):
    """Both gates' thresholds; the pre-gate and post-gate each hash only their own half."""

    pre: QualityPre = Field(default_factory=QualityPre)
    post: QualityPost = Field(default_factory=QualityPost)


__all__ = [
    "CalibrationSource",
    "CameraSpec",
    "Compression",
    "Container",
    "IngestOptions",
    "MessageEncoding",
    "PixelEncoding",
    "QualityPost",
    "QualityPre",
    "QualityThresholds",
    "SchemaEncoding",
    "SeriesSpec",
    "SourceConfig",
    "StampSource",
    "TimestampPolicy",
    "TopicContract",
    "TopicSpec",
    "VideoCodec",
    "VideoContract",
    "VideoFormat",
]
