"""Pre-gate checks of a video file: the sandboxed probe's findings, then suites over its measurements.

The probe is configured from the vendor's contract (:func:`probe_limits`): containers, the largest frame,
the memory and time a probe may take, and the thresholds of the findings it derives (blank, letterbox,
too few frames). Its findings are kept as checks; a file the probe could not read is judged on those
alone, a readable one also against the contract's codec, resolution, frame-rate and duration bounds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.enums import ReasonCode, Severity
from pipeline.quality.suite import CheckOutcome, Expect, duration_bounds, finding_outcomes, run_suite

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.config import VendorConfig
    from pipeline.videoprobe import VideoProbe, VideoProbeLimits

#: The probe's container family (chosen from the magic bytes) for each container a contract may allow.
#: AVI and MPEG-TS have no family: the probe refuses them before FFmpeg sees a byte.
CONTAINER_FAMILY = {"mp4": "mov", "mov": "mov", "mkv": "matroska", "webm": "matroska"}

#: Frames larger than this are refused when the vendor has no video contract: 8K UHD.
DEFAULT_MAX_PIXELS = 7680 * 4320


def probe_limits(vendor: VendorConfig) -> VideoProbeLimits:
    """The sandboxed probe's limits and finding thresholds for this vendor."""
    from pipeline.videoprobe import CONTAINER_FAMILIES, VideoProbeLimits

    pre = vendor.quality.pre
    video = vendor.video
    families = (
        tuple(sorted({CONTAINER_FAMILY[c] for c in video.containers if c in CONTAINER_FAMILY}))
        if video is not None
        else CONTAINER_FAMILIES
    )
    return VideoProbeLimits(
        allowed_containers=families or CONTAINER_FAMILIES,
        max_pixels=video.max_pixels if video is not None else DEFAULT_MAX_PIXELS,
        max_width_px=video.max_width_px if video is not None else None,
        max_height_px=video.max_height_px if video is not None else None,
        allowed_codecs=tuple(sorted(video.codecs)) if video is not None and video.codecs else None,
        memory_limit_bytes=int(vendor.ingest.probe_memory_bytes),
        timeout_s=float(vendor.ingest.probe_timeout_s),
        letterbox_min_fraction=min(max(pre.letterbox_min_fraction, 1e-6), 0.999),
        min_frames=max(pre.min_frames, 1),
        blank_ratio_max=max(pre.max_blank_fraction, 1e-6),
        blank_luma_std_max=pre.blank_luma_stddev_max,
        vfr_tolerance=pre.vfr_tolerance_fraction,
    )


def check_video(probe: VideoProbe, vendor: VendorConfig) -> list[CheckOutcome]:
    """All pre-gate checks of one video file."""
    outcomes = finding_outcomes(
        "video",
        [(f.code, f.detail, f.severity, f.severity is Severity.QUARANTINE, None) for f in probe.findings],
        gate_decided=frozenset(),
    )
    if probe.video_stream_index is None:
        return outcomes  # no header to hold against the contract (not a video, or it would not open)
    # The contract's checks run whatever the probe found: a blank 16x16 clip at 1000 fps is also out of
    # its size and rate bounds, and the file's reasons must say all of it.
    expectations = video_expectations(vendor)
    counted = any(f.code is ReasonCode.TOO_FEW_FRAMES for f in probe.findings)
    if probe.refused_undecoded or counted:  # no frame count to judge, or the probe said it already
        expectations = [e for e in expectations if e.name != "min_frames"]
    streams, episode = video_tables(probe)
    outcomes += run_suite(expectations, {"streams": streams, "episode": episode})
    return outcomes


def video_tables(probe: VideoProbe) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``streams`` (the video stream, if any) and ``episode`` (duration) for the suites."""
    import pandas as pd

    streams = pd.DataFrame(
        [
            {
                "codec": probe.codec,
                "width": probe.width,
                "height": probe.height,
                "decoded_frames": probe.decoded_frames,
                "fps": probe.fps_measured or probe.fps_avg,
            }
        ]
        if probe.video_stream_index is not None
        else [],
        columns=["codec", "width", "height", "decoded_frames", "fps"],
    )
    episode = pd.DataFrame([{"duration_s": probe.duration_s}])
    return streams, episode


def video_expectations(vendor: VendorConfig) -> list[Expect]:
    """The suites for this vendor, built from its thresholds and video contract."""
    pre = vendor.quality.pre
    video = vendor.video
    R = ReasonCode
    out = [
        Expect(
            "has_video",
            "streams",
            "ExpectTableRowCountToBeBetween",
            {"min_value": 1},
            R.NO_VIDEO_STREAM,
            explain=lambda f, labels: "the file has no video stream",
        ),
        Expect(
            "min_frames",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "decoded_frames", "min_value": pre.min_frames},
            R.TOO_FEW_FRAMES,
            explain=lambda f, labels: (
                f"{f['decoded_frames'].iloc[0]} frames decoded, at least {pre.min_frames} required"
            ),
        ),
        duration_bounds(pre),
    ]
    if video is None:
        return out

    def size(f: pd.DataFrame, labels: object) -> str:
        return (
            f"{f['width'].iloc[0]}x{f['height'].iloc[0]} px; allowed {video.min_width_px}..{video.max_width_px}"
            f" x {video.min_height_px}..{video.max_height_px}"
        )

    out += [
        Expect(
            "width_bounds",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "width", "min_value": video.min_width_px, "max_value": video.max_width_px},
            R.RESOLUTION_OUT_OF_BOUNDS,
            explain=size,
        ),
        Expect(
            "height_bounds",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "height", "min_value": video.min_height_px, "max_value": video.max_height_px},
            R.RESOLUTION_OUT_OF_BOUNDS,
            explain=size,
        ),
        Expect(
            "fps_bounds",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "fps", "min_value": video.min_fps, "max_value": video.max_fps},
            R.FRAME_RATE_OUT_OF_BOUNDS,
            explain=lambda f, labels: (
                f"{f['fps'].iloc[0]:.3f} fps; allowed {video.min_fps:g}..{video.max_fps:g}"
            ),
        ),
    ]
    if video.codecs:
        codecs = sorted(video.codecs)
        out.append(
            Expect(
                "allowed_codecs",
                "streams",
                "ExpectColumnValuesToBeInSet",
                {"column": "codec", "value_set": codecs},
                R.UNSUPPORTED_ENCODING,
                explain=lambda f, labels: f"codec {f['codec'].iloc[0]!r}; allowed {codecs}",
            )
        )
    return out
