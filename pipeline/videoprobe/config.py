"""The limits and thresholds of the video probe: one frozen model, validated at load, hashed with results."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# A container family is named after FFmpeg's demuxer short name. "mov" is the QuickTime / ISO-BMFF demuxer
# (mov, mp4, m4a, 3gp, 3g2, mj2); "matroska" is the Matroska / WebM demuxer. Everything else (HLS, concat,
# image sequences, raw streams, network formats) is refused before FFmpeg sees the file.
ContainerFamily = Literal["mov", "matroska"]
CONTAINER_FAMILIES: tuple[ContainerFamily, ...] = ("mov", "matroska")


class VideoProbeLimits(BaseModel):
    """What the sandboxed probe may do to a file, and the thresholds that turn measurements into findings.

    The first group bounds the worker (it parses hostile input); the second only decides which measurements
    become findings. A later quality gate decides states from the measurements themselves; these defaults
    give each finding a sensible trigger.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # --- sandbox ---------------------------------------------------------------------------------------
    allowed_containers: tuple[ContainerFamily, ...] = Field(
        default=CONTAINER_FAMILIES, min_length=1, description="Container families the probe may open."
    )
    # 8K UHD (7680x4320): the largest frame a robot or vendor camera produces; anything above is refused
    # from the header, before a single frame is allocated.
    max_pixels: int = Field(default=7680 * 4320, gt=0, description="Refuse frames with more pixels.")
    # The vendor contract's own bounds, applied to the header like max_pixels: a file whose codec or frame
    # size the contract refuses is never decoded (a 65500x8 MJPEG is under max_pixels but no camera).
    max_width_px: int | None = Field(default=None, gt=0, description="Refuse wider frames undecoded.")
    max_height_px: int | None = Field(default=None, gt=0, description="Refuse taller frames undecoded.")
    allowed_codecs: tuple[str, ...] | None = Field(
        default=None, description="FFmpeg codec names that may be decoded; None = any the wheel has."
    )
    # Address space the worker may add on top of its idle footprint (interpreter + av + numpy). A 4K HEVC
    # decoder with its reference pictures needs ~300 MB single-threaded; 2 GiB leaves room for 8K.
    memory_limit_bytes: int = Field(default=2 * 1024**3, gt=0, description="Worker address-space headroom.")
    # Full decode runs at ~500 fps per core at 720p (MEASURED.md), so a 10-minute 30 fps clip takes ~40 s;
    # ten minutes is far beyond any honest file and still bounds a decoder stuck in a loop.
    timeout_s: float = Field(default=600.0, gt=0, description="Wall-clock limit per file (worker killed).")
    # One decoder thread per worker: a drop is probed by several workers in parallel, and parallelising by
    # process scales better than frame threads on these machines (MEASURED.md).
    decode_threads: int = Field(default=1, ge=1, le=16, description="Decoder threads in the worker.")

    # --- measurement -----------------------------------------------------------------------------------
    # 32 frames spread over the clip are enough to see persistent bars and an all-black stream; each costs
    # one downscale to at most 256x256 grey (well under a millisecond).
    sample_frames: int = Field(default=32, ge=1, description="Frames converted to numpy for pixel stats.")
    sample_edge_px: int = Field(default=256, ge=16, description="Longest edge of a sampled frame, in pixels.")
    # Full-range luma (0-255 after conversion to grey): limited-range black is 16 before conversion, 0 after.
    black_luma_max: float = Field(
        default=24.0, ge=0, le=255, description="A row/column at most this is black."
    )
    # Standard deviation of luma under which a frame is "near-constant" (black, a test card colour, a lens
    # cap): sensor noise on real content is far above 3.
    blank_luma_std_max: float = Field(default=3.0, ge=0, description="A frame with less luma std is blank.")

    # --- finding triggers ------------------------------------------------------------------------------
    blank_ratio_max: float = Field(
        default=0.95, gt=0, le=1, description="BLANK_VIDEO when at least this share of samples is blank."
    )
    letterbox_min_fraction: float = Field(
        default=0.05, gt=0, lt=1, description="LETTERBOXED when bars cover this share of height or width."
    )
    # Relative deviation of a frame interval from a whole multiple of the median interval that counts as a
    # rate change (applied in the worker, so it shapes the stored off_median_fraction): 20% lets
    # millisecond time bases (33/34 ms at 30 fps) and 1001/1000 rounding through.
    vfr_tolerance: float = Field(default=0.2, gt=0, description="Relative interval deviation that counts.")
    # A dropped frame or two in a long clip is not VFR; more than 2% of intervals off the median is.
    vfr_max_off_fraction: float = Field(
        default=0.02, ge=0, lt=1, description="VARIABLE_FRAME_RATE when more intervals than this differ."
    )
    min_frames: int = Field(default=2, ge=1, description="TOO_FEW_FRAMES below this many decoded frames.")
    # Share of demuxed video packets that must come out as frames; edit lists legitimately hide a few.
    min_decoded_ratio: float = Field(default=0.5, ge=0, le=1, description="TOO_FEW_FRAMES below this ratio.")
