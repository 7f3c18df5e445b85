"""Turn a probe's measurements into coded findings. Pure: the same probe and limits give the same list."""

from __future__ import annotations

from pipeline.enums import ReasonCode, Severity
from pipeline.videoprobe.config import VideoProbeLimits
from pipeline.videoprobe.model import VideoFinding, VideoProbe

_INTERLACED_ORDERS = {"tt", "bb", "tb", "bt"}


def derive_findings(probe: VideoProbe, limits: VideoProbeLimits) -> list[VideoFinding]:
    """Findings for everything the worker measured, quarantining ones first, in a stable order."""
    found = _structure(probe, limits)
    if probe.decoded_frames:
        found += _content(probe, limits)
    # Stable sort: quarantine before flag, otherwise in the order checked.
    return sorted(found, key=lambda f: f.severity is not Severity.QUARANTINE)


def _structure(probe: VideoProbe, limits: VideoProbeLimits) -> list[VideoFinding]:
    of = VideoFinding.of
    found: list[VideoFinding] = []
    if probe.resource_error:
        found.append(
            of(
                ReasonCode.PROBE_RESOURCE_LIMIT,
                f"{_mib(limits.memory_limit_bytes)} memory limit "
                f"reached while probing: {probe.resource_error}",
            )
        )
    if probe.worker_error:
        found.append(of(ReasonCode.CONTAINER_ERROR, f"probe failed unexpectedly: {probe.worker_error}"))
    if probe.open_error:
        found.append(
            of(
                ReasonCode.CONTAINER_ERROR,
                f"{probe.sniffed_container} demuxer cannot open the file: {probe.open_error}",
            )
        )
        return found
    if probe.container_format is not None and probe.video_stream_index is None:
        streams = ", ".join(f"{s.type} {s.codec or '?'}" for s in probe.streams) or "none"
        found.append(of(ReasonCode.NO_VIDEO_STREAM, f"no video stream (streams: {streams})"))
        return found
    if probe.codec_refused:
        allowed = ", ".join(limits.allowed_codecs or ())
        found.append(
            of(
                ReasonCode.UNSUPPORTED_ENCODING,
                f"codec {probe.codec!r} is not allowed (allowed: {allowed}); not decoded",
            )
        )
    if probe.resolution_refused:
        # The last decoded size is the one refused mid-stream; none decoded means refused from the header.
        width, height = (probe.resolutions or [(probe.width or 0, probe.height or 0)])[-1]
        found.append(of(ReasonCode.RESOLUTION_OUT_OF_BOUNDS, _size_refusal(width, height, limits)))
    if probe.demux_error:
        found.append(
            of(
                ReasonCode.CONTAINER_ERROR,
                f"demuxing stopped after {probe.packets} packets: {probe.demux_error}",
            )
        )
    if (
        probe.header_frames
        and probe.packets < probe.header_frames
        and not (probe.resolution_refused or probe.codec_refused)
    ):
        found.append(
            of(
                ReasonCode.TRUNCATED,
                f"the container declares {probe.header_frames} video frames, "
                f"only {probe.packets} packets could be read",
            )
        )
    errors = probe.decode_errors + probe.corrupt_frames
    if errors or probe.error_logs:
        found.append(
            of(
                ReasonCode.DECODE_ERROR,
                f"{probe.decode_errors} packet(s) refused, {probe.corrupt_frames} "
                f"corrupt frame(s), {probe.error_logs} decoder error log(s); "
                f"first: {probe.first_error}",
            )
        )
    if probe.sample_error:
        found.append(
            of(
                ReasonCode.DECODE_ERROR,
                f"decoded frames cannot be converted for pixel statistics: {probe.sample_error}",
            )
        )
    if (
        not probe.refused_undecoded
        and not probe.resolution_refused
        and not probe.resource_error
        and not (probe.worker_error)
    ):
        expected = max(probe.packets - probe.discarded_packets, 0)
        if probe.decoded_frames < limits.min_frames:
            found.append(
                of(
                    ReasonCode.TOO_FEW_FRAMES,
                    f"{probe.decoded_frames} frame(s) decoded, at least {limits.min_frames} required",
                )
            )
        elif expected and probe.decoded_frames < limits.min_decoded_ratio * expected:
            found.append(
                of(
                    ReasonCode.TOO_FEW_FRAMES,
                    f"{probe.decoded_frames} of {expected} packets decoded "
                    f"to frames, below {limits.min_decoded_ratio:.0%}",
                )
            )
    return found


def _content(probe: VideoProbe, limits: VideoProbeLimits) -> list[VideoFinding]:
    of = VideoFinding.of
    found: list[VideoFinding] = []
    if probe.blank_ratio is not None and probe.blank_ratio >= limits.blank_ratio_max:
        found.append(
            of(
                ReasonCode.BLANK_VIDEO,
                f"{probe.blank_frames} of {probe.sampled_frames} sampled frames "
                f"are near-constant (mean luma {probe.mean_luma:.1f})",
            )
        )
    if probe.leading_keyframe is False:
        found.append(
            of(
                ReasonCode.MISSING_LEADING_KEYFRAME,
                f"the first decoded frame is a {probe.leading_picture_type}-frame, not a keyframe",
            )
        )
    if probe.rotation_deg or probe.reflected:
        mirror = " and mirrored" if probe.reflected else ""
        found.append(
            of(
                ReasonCode.ROTATED,
                f"display matrix rotates the picture by {probe.rotation_deg}° (counter-clockwise "
                f"positive){mirror}; a transcode must apply it",
            )
        )
    if probe.interlaced_frames or probe.field_order in _INTERLACED_ORDERS:
        found.append(
            of(
                ReasonCode.INTERLACED,
                f"{probe.interlaced_frames} of {probe.decoded_frames} frames "
                f"interlaced, field order {probe.field_order or 'unknown'}",
            )
        )
    # variable_frame_rate is None when too few intervals were seen to judge; the share is re-judged here
    # so that a gate can apply its own threshold to a stored probe.
    t = probe.timing if probe.variable_frame_rate is not None else None
    if (
        t is not None
        and t.off_median_fraction is not None
        and t.off_median_fraction > limits.vfr_max_off_fraction
    ):
        found.append(
            of(
                ReasonCode.VARIABLE_FRAME_RATE,
                f"{t.off_median_fraction:.1%} of frame intervals are "
                f"more than {limits.vfr_tolerance:.0%} off a multiple of "
                f"the median {t.interval_median_s:.4f} s (range "
                f"{t.interval_min_s:.4f}-{t.interval_max_s:.4f} s)",
            )
        )
    box = probe.letterbox
    if box is not None and max(box.vertical, box.horizontal) >= limits.letterbox_min_fraction:
        found.append(
            of(
                ReasonCode.LETTERBOXED,
                f"black bars top {box.top:.1%}, bottom {box.bottom:.1%}, "
                f"left {box.left:.1%}, right {box.right:.1%}",
            )
        )
    return found


def _size_refusal(width: int, height: int, limits: VideoProbeLimits) -> str:
    over = []
    if width <= 0 or height <= 0:
        over.append("the header holds no valid frame size (FFmpeg refused the one declared)")
    if width * height > limits.max_pixels:
        over.append(f"{width * height} pixels exceeds max_pixels {limits.max_pixels}")
    if limits.max_width_px is not None and width > limits.max_width_px:
        over.append(f"width exceeds max_width_px {limits.max_width_px}")
    if limits.max_height_px is not None and height > limits.max_height_px:
        over.append(f"height exceeds max_height_px {limits.max_height_px}")
    return f"{width}x{height}: {'; '.join(over) or 'over the limits'}; not decoded past it"


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"
