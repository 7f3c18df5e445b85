"""Options of a synthetic drop: frozen models that refuse unknown keys and name the allowed values."""

from __future__ import annotations

from fractions import Fraction
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.errors import ConfigError
from pipeline.synth.defects import RobotDefect, VideoDefect, defect_applies
from pipeline.synth.encode import RAW_ENCODINGS, H264Settings, X264Preset
from pipeline.synth.flavors import FLAVOR_NAMES
from pipeline.synth.footage import check_footage
from pipeline.synth.robot import Compression, EpisodeMedia
from pipeline.synth.scene import check_frame_size
from pipeline.synth.video import ClipColour, ClipMedia


class RobotDropConfig(BaseModel):
    """A robot-log drop: ``episodes`` clean episodes (more to reach ``target_size_bytes``), one per defect."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    episodes: int = Field(3, ge=0, description="Clean episodes, at least; --size may add more.")
    seconds: float = Field(2.0, gt=0, le=7200, description="Length of each episode.")
    seed: int = Field(0, ge=0, lt=2**32)
    width: int = Field(320, description="Camera frame width, a multiple of 8.")
    height: int = Field(240, description="Camera frame height, a multiple of 8.")
    robots: int = Field(2, ge=1, le=99)
    episodes_per_session: int = Field(3, ge=1, le=1000)
    # ultrafast by default: a robot's hardware encoder spends bits, not CPU, and a benchmark drop
    # reaches its size about 5x sooner than with veryfast.
    preset: X264Preset = "ultrafast"
    crf: int = Field(23, ge=0, le=51)
    gop_frames: int = Field(30, ge=1, le=600, description="Keyframe interval; 30 = one per second.")
    compression: Compression = "zstd"
    chunk_size_bytes: int = Field(1 << 20, ge=4096)
    defects: tuple[RobotDefect, ...] = ()
    target_size_bytes: int | None = Field(
        None, ge=1, description="Add clean episodes until the drop is this big."
    )
    flavor: str = Field(
        "default", description="Message shapes (pipeline.synth.flavors): " + ", ".join(FLAVOR_NAMES)
    )
    pixel_encoding: str = Field("rgb8", description="Pixel encoding of raw flavors' cameras (ROS name).")
    footage: str | None = Field(
        None,
        description="A video file the cameras film instead of the procedural scene (each its own window).",
    )

    @model_validator(mode="after")
    def _check(self) -> RobotDropConfig:
        check_frame_size(self.width, self.height)
        if self.footage is not None:
            check_footage(self.footage)
        if self.flavor not in FLAVOR_NAMES:
            raise ValueError(f"flavor {self.flavor!r} is unknown; allowed: {', '.join(FLAVOR_NAMES)}")
        if self.pixel_encoding not in RAW_ENCODINGS:
            raise ValueError(
                f"pixel encoding {self.pixel_encoding!r} is unknown; allowed: {', '.join(RAW_ENCODINGS)}"
            )
        wrong = [d.value for d in self.defects if not defect_applies(d, self.flavor)]
        if wrong:
            raise ValueError(f"defect(s) {', '.join(wrong)} cannot be made in flavor {self.flavor!r}")
        if RobotDefect.DUPLICATE in self.defects and self.episodes < 1:
            raise ValueError("defect 'duplicate' copies a clean episode; episodes must be >= 1")
        return self

    def media(self) -> EpisodeMedia:
        h264 = H264Settings(preset=self.preset, crf=self.crf, gop_frames=self.gop_frames, zero_latency=True)
        return EpisodeMedia(
            width=self.width,
            height=self.height,
            h264=h264,
            compression=self.compression,
            chunk_size_bytes=self.chunk_size_bytes,
            flavor=self.flavor,
            pixel_encoding=self.pixel_encoding,
            footage=self.footage,
        )


class VideoDropConfig(BaseModel):
    """A video drop: ``clips`` clean MP4 clips (more to reach ``target_size_bytes``), one file per defect."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    clips: int = Field(3, ge=0)
    seconds: float = Field(2.0, gt=0, le=7200)
    fps: float = Field(30.0, gt=0, le=240, description="29.97 and the like are kept as n/1001.")
    seed: int = Field(0, ge=0, lt=2**32)
    width: int = 320
    height: int = 240
    scene_cuts: int = Field(2, ge=0, le=1000, description="Hard cuts per clip.")
    preset: X264Preset = "veryfast"
    crf: int = Field(23, ge=0, le=51)
    gop_frames: int = Field(60, ge=1, le=600)
    bframes: int = Field(2, ge=0, le=16)
    sidecars: bool = Field(True, description="Write a <clip>.meta.json beside each clip.")
    defects: tuple[VideoDefect, ...] = ()
    target_size_bytes: int | None = Field(None, ge=1)
    colour: ClipColour = Field(
        "bt601", description="bt601: untagged (read as BT.601); bt709: tagged BT.709, as HD cameras record."
    )

    @model_validator(mode="after")
    def _check(self) -> VideoDropConfig:
        check_frame_size(self.width, self.height)
        for copies in (VideoDefect.DUPLICATE, VideoDefect.REENCODED):
            if copies in self.defects and self.clips < 1:
                raise ValueError(f"defect {copies.value!r} copies a clean clip; clips must be >= 1")
        return self

    @property
    def frame_rate(self) -> Fraction:
        return Fraction(self.fps).limit_denominator(1001)

    def media(self) -> ClipMedia:
        h264 = H264Settings(
            preset=self.preset, crf=self.crf, gop_frames=self.gop_frames, bframes=self.bframes
        )
        return ClipMedia(
            width=self.width, height=self.height, fps=self.frame_rate, h264=h264, colour=self.colour
        )


_M = TypeVar("_M", bound=BaseModel)


def build_config(model: type[_M], source: str, **values: object) -> _M:
    """Validate ``values`` into ``model``, turning pydantic's errors into one :class:`ConfigError`."""
    try:
        return model(**values)
    except ValidationError as exc:
        problems = [(".".join(str(p) for p in err["loc"]), err["msg"]) for err in exc.errors()]
        raise ConfigError(source, problems) from None
