"""How accepted inputs are processed: the transcode profile, annotators and shards.

Read by the ``transcode``, ``quality_post``, ``annotate`` and ``shard`` steps; each step's config hash covers
only the section it reads (see :mod:`pipeline.config.hashing`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ByteSize, Field, JsonValue, model_validator

from pipeline.config.controls import controls
from pipeline.config.scoring import CascadeStage, QualityRankOptions
from pipeline.config.types import FrozenModel, Lax, Loc, PositiveBytes, Slug, raise_problems
from pipeline.enums import Gate, ReasonCode


class TrainingProfile(StrEnum):
    """The access pattern a transcoded episode is laid out for."""

    VLA = "vla"  # short GOP: sparse random frames for vision-language-action policies
    WORLD_MODEL = "world_model"  # long GOP: long contiguous reads
    RANDOM_ACCESS = "random_access"  # shared intra anchors, non-reference B-frames between them (DDRA)


#: H.264 entropy coding: CABAC (x264's default from veryfast up) or CAVLC, which `sluice bench read` found
#: to decode 1.77x faster at 720p for 1.17x the bytes (docs/episodes.md).
EntropyCoder = Literal["cabac", "cavlc"]

#: The output codec: H.264 (libx264) or H.265/HEVC (libx265). Both play in Foxglove (CompressedVideo
#: ``h264`` / ``h265``) when there are no B-frames.
OutputCodec = Literal["h264", "h265"]

X264Preset = Literal[
    "ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"
]

#: x264 and x265 allow at most 16 consecutive B-frames.
X264_MAX_BFRAMES = 16

#: What each profile fills in when the file does not say. The GOP sizes: 10 frames (1/3 s at 30 fps) keeps a
#: random frame within a few decodes for VLA sampling; 120 (4 s) makes long reads cheap for world models;
#: random_access follows the DDRA layout (an intra anchor every 17 frames, the longest interval a 16-frame
#: B-run allows, QP 26; `sluice bench read` matches quality by searching a CRF instead).
PROFILE_DEFAULTS: dict[TrainingProfile, dict[str, int]] = {
    TrainingProfile.VLA: {"gop_frames": 10, "bframes": 0, "crf": 23},
    TrainingProfile.WORLD_MODEL: {"gop_frames": 120, "bframes": 0, "crf": 23},
    TrainingProfile.RANDOM_ACCESS: {"gop_frames": 17, "bframes": 16, "qp": 26},
}


class ChunkTargets(FrozenModel):
    """Target MCAP chunk size per topic group of a transcoded episode (cut at the next boundary)."""

    # One GOP of three 720p cameras at CRF 23 is about 1 MiB at GOP 10: a sample then touches one chunk.
    cameras: PositiveBytes = Field(
        default=ByteSize(2**20), description="Camera group (cut at GOP boundaries)."
    )
    # The Python reader decompresses whole chunks; ≤ 256 KiB keeps 2 s of state reads near 2x the bytes used.
    proprio: PositiveBytes = Field(default=ByteSize(256 * 2**10), description="State and action group.")


class GroupCompression(FrozenModel):
    """Chunk compression per topic group."""

    cameras: Literal["none", "lz4", "zstd"] = Field(
        default="none", description="H.264 does not compress (1.00x)."
    )
    proprio: Literal["none", "lz4", "zstd"] = Field(
        default="zstd", description="Float state: 1.2x with zstd."
    )


class ClipOptions(FrozenModel):
    """Video-vendor transform: normalise and cut clips (``kind: video`` only)."""

    fps: float = Field(default=30.0, gt=0, le=240, description="Constant output frame rate.")
    # Ten seconds bounds a clip's decode cost for a training sample and its size in a shard.
    # The clip post-gate judges each clip against the same bounds (one frame of slack).
    max_clip_duration_s: float = Field(
        default=10.0,
        gt=0,
        description="Longer scenes are split.",
        json_schema_extra=controls((Gate.POST, "duration", ReasonCode.DURATION_MISMATCH)),
    )
    min_clip_duration_s: float = Field(
        default=1.0,
        ge=0,
        description="Shorter scenes are dropped.",
        json_schema_extra=controls((Gate.POST, "duration", ReasonCode.DURATION_MISMATCH)),
    )
    # FFmpeg's scene score (0-1); 0.3 catches hard cuts without splitting on fast motion.
    scene_cut_threshold: float = Field(
        default=0.3, gt=0, le=1, description="Scene-change score that cuts a clip."
    )
    apply_rotation: bool = Field(default=True, description="Rotate frames by the display-matrix rotation.")
    deinterlace: bool = Field(default=True, description="Deinterlace interlaced inputs.")
    crop_black_bars: bool = Field(default=True, description="Crop letterbox/pillarbox bars.")

    @model_validator(mode="after")
    def _durations(self) -> ClipOptions:
        if self.min_clip_duration_s > self.max_clip_duration_s:
            raise_problems(
                [
                    (
                        ("min_clip_duration_s",),
                        f"{self.min_clip_duration_s} > max_clip_duration_s {self.max_clip_duration_s}",
                    )
                ]
            )
        return self


class TranscodeOptions(FrozenModel):
    """The training profile and encoder settings of the ``transcode`` step.

    Fields the file leaves out are filled from the profile (:data:`PROFILE_DEFAULTS`), so that the resolved
    config (``sluice vendor show``) and its hash say exactly what the encoder was asked for.
    """

    profile: Annotated[TrainingProfile, Lax] = Field(
        default=TrainingProfile.VLA, description="vla | world_model | random_access."
    )
    codec: OutputCodec = Field(default="h264", description="h264 (libx264) | h265 (libx265).")
    gop_frames: int = Field(ge=1, le=600, description="Keyframe interval (x264 keyint), in frames.")
    bframes: int = Field(
        ge=0, le=X264_MAX_BFRAMES, description="Consecutive B-frames (x264 and x265 cap them at 16)."
    )
    # fractional CRFs are x264's and x265's own (a quality search needs steps finer than one)
    crf: int | float | None = Field(
        default=None, ge=0, le=51, description="Constant rate factor; exclusive with qp."
    )
    qp: int | None = Field(default=None, ge=0, le=51, description="Constant quantiser; exclusive with crf.")
    # veryfast encodes ≈ 109 fps per core at 720p against 37 for medium (MEASURED.md).
    preset: X264Preset = Field(default="veryfast", description="x264 preset.")
    # Entropy decoding is most of a 720p frame's decode time; CAVLC trades bytes for dataloader CPU.
    entropy_coder: EntropyCoder = Field(
        default="cabac",
        description="cabac | cavlc: cavlc decodes ~1.8x faster for ~17% more bytes (sampling CPU vs storage).",
    )
    # 1280x720: policy inputs are at most 720p and every measured number here is at 720p.
    max_pixels: int = Field(default=1280 * 720, ge=64 * 64, description="Frames above this are scaled down.")
    # 50 Hz is the action rate: state (200 Hz) is resampled onto the action grid, so one index serves both.
    resample_rate_hz: float | None = Field(
        default=50.0,
        gt=0,
        description="Fixed rate for state and actions (native streams kept); none = no resample.",
    )
    chunk_target_bytes: ChunkTargets = Field(default_factory=ChunkTargets)
    compression: GroupCompression = Field(default_factory=GroupCompression)
    clips: ClipOptions | None = Field(
        default=None, description="Video vendors only (filled in for kind video)."
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        try:
            profile = TrainingProfile(data.get("profile", TrainingProfile.VLA))
        except (ValueError, TypeError):
            # The profile itself is reported; fill VLA's numbers so no "missing" noise follows it.
            profile = TrainingProfile.VLA
        filled = dict(data)
        defaults = PROFILE_DEFAULTS[profile]
        filled.setdefault("gop_frames", defaults["gop_frames"])
        filled.setdefault("bframes", defaults["bframes"])
        if "crf" not in filled and "qp" not in filled:
            filled.update({k: v for k, v in defaults.items() if k in ("crf", "qp")})
        return filled

    @model_validator(mode="after")
    def _consistent(self) -> TranscodeOptions:
        problems: list[tuple[Loc, str]] = []
        if (self.crf is None) == (self.qp is None):
            problems.append((("crf",), f"give exactly one of crf and qp (got crf={self.crf}, qp={self.qp})"))
        if self.bframes >= self.gop_frames:
            problems.append(
                (("bframes",), f"{self.bframes} B-frames do not fit a GOP of {self.gop_frames} frames")
            )
        if self.codec == "h265" and self.entropy_coder != "cabac":
            problems.append((("entropy_coder",), "h265 has only CABAC; entropy_coder cavlc needs codec h264"))
        if self.profile is TrainingProfile.RANDOM_ACCESS:
            if self.gop_frames > X264_MAX_BFRAMES + 1:
                problems.append(
                    (
                        ("gop_frames",),
                        f"random_access needs gop_frames ≤ {X264_MAX_BFRAMES + 1} (anchors around at most "
                        f"{X264_MAX_BFRAMES} B-frames), got {self.gop_frames}",
                    )
                )
            elif self.bframes < self.gop_frames - 1:
                problems.append(
                    (
                        ("bframes",),
                        f"random_access needs every frame between two anchors to be a B-frame: "
                        f"bframes ≥ gop_frames - 1 = {self.gop_frames - 1}, got {self.bframes}",
                    )
                )
        elif self.bframes:
            problems.append(
                (
                    ("bframes",),
                    f"profile {self.profile.value} must have bframes 0 (Foxglove cannot show B-frames); "
                    f"only random_access uses them",
                )
            )
        raise_problems(problems)
        return self


class AnnotatorConfig(FrozenModel):
    """One annotator of the registry, pinned to a version (a new version adds rows, keeps the old)."""

    enabled: bool = Field(default=True, description="Run this annotator.")
    version: str = Field(min_length=1, description="Version string; quote it in YAML ('1', not 1).")
    params: dict[str, JsonValue] = Field(default_factory=dict, description="Annotator-specific parameters.")


class AnnotateOptions(FrozenModel):
    """Annotators of the ``annotate`` step, by registry name; their cascade and the rank their scores give
    (:mod:`pipeline.config.scoring`)."""

    annotators: dict[Slug, AnnotatorConfig] = Field(
        default_factory=dict, description="Annotator name → settings."
    )
    stages: list[CascadeStage] = Field(
        default_factory=list,
        description="Cascade, cheap first: an episode failing a stage skips the later ones. Annotators in "
        "no stage run first, ungated.",
    )
    rank: QualityRankOptions | None = Field(default=None, description="Quality rank from the scores.")

    @model_validator(mode="after")
    def _check_stages(self) -> AnnotateOptions:
        problems: list[tuple[Loc, str]] = []
        staged: dict[str, str] = {}
        names: set[str] = set()
        for i, stage in enumerate(self.stages):
            if stage.name in names:
                problems.append((("stages", i, "name"), f"stage {stage.name!r} is named twice"))
            names.add(stage.name)
            for j, name in enumerate(stage.annotators):
                if name not in self.annotators:
                    allowed = ", ".join(sorted(self.annotators)) or "none configured"
                    problems.append(
                        (
                            ("stages", i, "annotators", j),
                            f"{name!r} is not in annotate.annotators ({allowed})",
                        )
                    )
                elif name in staged:
                    problems.append(
                        (("stages", i, "annotators", j), f"{name!r} is already in stage {staged[name]!r}")
                    )
                staged.setdefault(name, stage.name)
        raise_problems(problems)
        return self


class ShardOptions(FrozenModel):
    """WebDataset shards written by the ``shard`` step."""

    format: Literal["webdataset"] = Field(default="webdataset", description="Shard format.")
    # 256 MiB: long sequential reads per shard, yet enough shards per dataset to balance training ranks.
    target_shard_bytes: PositiveBytes = Field(default=ByteSize(256 * 2**20), description="Target shard size.")
