"""What the video probe records about one file: a JSON-serialisable model stored in the catalog as is."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from pipeline.enums import REASON_SEVERITY, ReasonCode, Severity


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class VideoFinding(_Frozen):
    """One coded observation with a human-readable detail; ``severity`` defaults from ``REASON_SEVERITY``."""

    code: ReasonCode
    severity: Severity
    detail: str

    @classmethod
    def of(cls, code: ReasonCode, detail: str) -> VideoFinding:
        # Details may quote file names; undecodable name bytes must not make the record unstorable.
        text = detail.encode("utf-8", "backslashreplace").decode("utf-8")
        return cls(code=code, severity=REASON_SEVERITY[code], detail=text)


class StreamSummary(_Frozen):
    index: int
    type: str
    codec: str | None
    attached_picture: bool = False


class DecoderInfo(_Frozen):
    """The decoding stack that produced the result: outcomes of malformed files depend on it."""

    pyav: str
    ffmpeg: str
    libavcodec: str
    libavformat: str
    decoder: str | None = Field(default=None, description="FFmpeg decoder used for the video stream.")

    @property
    def label(self) -> str:
        return f"libavcodec {self.libavcodec} (FFmpeg {self.ffmpeg}, PyAV {self.pyav})"


class KeyframeStats(_Frozen):
    """Keyframes as the decoder flags them; intervals in frames between consecutive keyframes."""

    count: int = 0
    interval_min: int | None = None
    interval_max: int | None = None
    interval_mean: float | None = None


class FrameTiming(_Frozen):
    """Presentation timestamps of decoded frames, in presentation order."""

    frames_without_pts: int = 0
    duplicate_pts: int = 0
    interval_min_s: float | None = None
    interval_max_s: float | None = None
    interval_median_s: float | None = None
    # Share of intervals that are not within the configured tolerance of a whole multiple of the median.
    off_median_fraction: float | None = None
    # Intervals of about 2, 3, ... times the median: frames missing from a constant-rate stream.
    dropped_frame_gaps: int = 0


class Letterbox(_Frozen):
    """Black bars present in every non-blank sampled frame, as fractions of the frame's height or width."""

    top: float
    bottom: float
    left: float
    right: float

    @property
    def vertical(self) -> float:
        return self.top + self.bottom

    @property
    def horizontal(self) -> float:
        return self.left + self.right


class ProbeTiming(_Frozen):
    probe_s: float = Field(description="Wall time in the caller for this file, worker start excluded.")
    worker_start_s: float | None = Field(default=None, description="When this file had to start a worker.")
    worker_s: float | None = Field(default=None, description="Open + demux + decode + stats in the worker.")
    per_frame_ms: float | None = Field(default=None, description="probe_s per decoded frame.")


class VideoProbe(_Frozen):
    """Everything measured about one video file, plus the findings derived from it.

    ``None`` means "not measured" (the file was refused before that point, or the value does not exist in
    it), never zero. ``findings`` is empty for a clean file.
    """

    path: str = Field(description="The probed path; file-name bytes that are not UTF-8 appear as \\xNN.")
    size_bytes: int | None = None
    sniffed_container: str | None = Field(default=None, description="Family chosen from the magic bytes.")
    container_format: str | None = Field(default=None, description="FFmpeg demuxer that opened the file.")
    creation_time: str | None = Field(
        default=None, description="The container's creation_time tag (when it was recorded), as written."
    )
    streams: list[StreamSummary] = Field(default_factory=list)
    audio_only: bool = False
    video_stream_index: int | None = None
    codec: str | None = None
    profile: str | None = None
    width: int | None = None
    height: int | None = None
    pixel_format: str | None = None
    fps_avg: float | None = Field(default=None, description="Container's average frame rate.")
    fps_r: float | None = Field(default=None, description="Container's base (r_frame_rate) frame rate.")
    fps_measured: float | None = Field(default=None, description="From the decoded frames' timestamps.")
    header_frames: int | None = Field(default=None, description="Frame count the container declares.")
    packets: int = 0
    discarded_packets: int = Field(
        default=0, description="Packets the demuxer marks as outside the edit list."
    )
    decoded_frames: int = 0
    duration_s: float | None = None
    variable_frame_rate: bool | None = None
    timing: FrameTiming | None = None
    interlaced_frames: int = 0
    field_order: str | None = None
    rotation_deg: int | None = Field(
        default=None,
        description="Counter-clockwise rotation the display matrix applies (PyAV's VideoFrame.rotation), "
        "in (-180, 180].",
    )
    reflected: bool | None = Field(default=None, description="The display matrix also mirrors the picture.")
    leading_keyframe: bool | None = None
    leading_picture_type: str | None = None
    keyframes: KeyframeStats | None = None
    picture_types: dict[str, int] = Field(default_factory=dict)
    resolutions: list[tuple[int, int]] = Field(default_factory=list, description="Distinct decoded sizes.")
    sampled_frames: int = 0
    sample_error: str | None = Field(
        default=None, description="Decoded frames could not be converted to grey."
    )
    blank_frames: int = Field(default=0, description="Sampled frames that are near-constant.")
    blank_ratio: float | None = None
    mean_luma: float | None = Field(default=None, description="Mean luma of the sampled frames (0-255).")
    letterbox: Letterbox | None = None
    decode_errors: int = Field(default=0, description="Packets the decoder refused.")
    corrupt_frames: int = Field(default=0, description="Frames the decoder flagged as corrupt.")
    error_logs: int = Field(default=0, description="Error-level FFmpeg log lines while decoding.")
    first_error: str | None = None
    resolution_refused: bool = Field(
        default=False, description="Not decoded: over max_pixels, max_width_px or max_height_px."
    )
    codec_refused: bool = Field(default=False, description="Not decoded: the codec is not allowed.")
    open_error: str | None = None
    demux_error: str | None = None
    resource_error: str | None = Field(default=None, description="The worker hit its memory limit.")
    worker_error: str | None = Field(default=None, description="The worker failed in an unexpected way.")
    decoder: DecoderInfo | None = None
    probe_timing: ProbeTiming | None = None
    findings: list[VideoFinding] = Field(default_factory=list)

    @property
    def refused_undecoded(self) -> bool:
        """Refused from its header (codec or frame size): nothing was decoded, on purpose."""
        return self.codec_refused or (self.resolution_refused and not self.resolutions)

    @property
    def codes(self) -> list[ReasonCode]:
        return [f.code for f in self.findings]

    @property
    def quarantined(self) -> bool:
        """True when any finding's default severity holds the file back."""
        return any(f.severity is Severity.QUARANTINE for f in self.findings)

    def finding(self, code: ReasonCode) -> VideoFinding | None:
        return next((f for f in self.findings if f.code is code), None)
