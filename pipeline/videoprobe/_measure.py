"""Runs inside the sandboxed worker only: open, demux and fully decode one file with PyAV, and measure it.

The result is a plain dict whose keys are :class:`pipeline.videoprobe.model.VideoProbe` fields, so the
caller validates it into the model. Nothing here decides what is good or bad; :mod:`.findings` does.
"""

from __future__ import annotations

import os
import stat
import time
from fractions import Fraction
from typing import Any

import av

from pipeline.videoprobe._frames import FrameStats, error_text, log_text

# AVFieldOrder, as FFmpeg numbers it.
_FIELD_ORDERS = {1: "progressive", 2: "tt", 3: "bb", 4: "tb", 5: "bt"}


def decoder_info() -> dict[str, str]:
    """The decoding stack of this worker (outcomes of malformed files depend on it)."""
    versions = av.library_versions
    return {
        "pyav": av.__version__,
        "ffmpeg": str(av.ffmpeg_version_info),
        "libavcodec": ".".join(str(v) for v in versions["libavcodec"]),
        "libavformat": ".".join(str(v) for v in versions["libavformat"]),
    }


def warm_up(limits: dict[str, Any]) -> None:
    """Run the per-frame bookkeeping once on a synthetic frame, so the lazy imports and first-use setup of
    PyAV and numpy are paid at worker start, not charged to the first file's timeout."""
    frame = av.VideoFrame(64, 48, "yuv420p")
    frame.pts, frame.time_base = 0, Fraction(1, 30)
    acc = FrameStats(limits, stride=1)
    acc.add(frame)
    frame.pts = 1
    acc.add(frame)
    acc.report({})


def measure(path: bytes, family: str, limits: dict[str, Any]) -> dict[str, Any]:
    """Measure the file at ``path`` (bytes, any name) opened with the demuxer ``family``."""
    started = time.perf_counter()
    out: dict[str, Any] = {}
    # O_NONBLOCK: a FIFO swapped in after the caller's checks must not block the worker on open.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            out["open_error"] = "not a regular file"
            return out
        # FFmpeg reopens the very inode we hold through procfs: an ASCII URL whatever the vendor named the
        # file (newlines, leading dashes, non-UTF-8 bytes), and no protocol prefix to misparse.
        _measure_open(f"file:/proc/self/fd/{fd}", family, limits, out)
    finally:
        os.close(fd)
        out["worker_s"] = time.perf_counter() - started
    return out


def _open(url: str, family: str, limits: dict[str, Any]) -> av.container.InputContainer:
    container_options = {
        # Only local files, even for references inside the file; only the allowed demuxers, even if a
        # nested open tried another one.
        "protocol_whitelist": "file",
        "format_whitelist": ",".join(limits["allowed_containers"]),
        # Bounded stream count: each stream costs a codec context.
        "max_streams": "64",
    }
    if family == "mov":
        # Never follow data references (external media files named inside the movie).
        container_options["enable_drefs"] = "0"
        container_options["use_absolute_path"] = "0"
    # No max_pixels here: given at open, FFmpeg zeroes the size of a stream over it, and the header check
    # below could no longer name what the file declares. Opening allocates no picture; _decode sets the
    # guard on the decoder before the first packet.
    codec_options = {"threads": str(limits["decode_threads"])}
    return av.open(url, mode="r", format=family, container_options=container_options, options=codec_options)


def _measure_open(url: str, family: str, limits: dict[str, Any], out: dict[str, Any]) -> None:
    with av.logging.Capture(local=False) as open_logs:
        try:
            container = _open(url, family, limits)
        except av.FFmpegError as exc:
            out["open_error"] = error_text(exc, open_logs)
            return
    with container:
        out["container_format"] = container.format.name
        # When the camera says it recorded (MP4 mvhd / Matroska DateUTC), as FFmpeg reads it: ISO 8601, UTC.
        out["creation_time"] = container.metadata.get("creation_time")
        out["streams"] = [_stream_summary(s) for s in container.streams]
        videos = [s for s in container.streams.video if not _attached_picture(s)]
        if not videos:
            out["audio_only"] = bool(container.streams.audio)
            return
        stream = videos[0]
        _describe(container, stream, out)
        width, height = stream.codec_context.width, stream.codec_context.height
        if (
            width <= 0  # FFmpeg zeroes a size it finds invalid (over its own image size limit)
            or height <= 0
            or width * height > limits["max_pixels"]
            or (limits["max_width_px"] is not None and width > limits["max_width_px"])
            or (limits["max_height_px"] is not None and height > limits["max_height_px"])
        ):
            out["resolution_refused"] = True
        allowed = limits["allowed_codecs"]
        if allowed is not None and stream.codec_context.name not in allowed:
            out["codec_refused"] = True
        if out.get("resolution_refused") or out.get("codec_refused"):
            return  # refused from the header: no decoder ever sees a frame
        _decode(container, stream, limits, out)


def _attached_picture(stream: av.stream.Stream) -> bool:
    return bool(stream.disposition & av.stream.Disposition.attached_pic)


def _stream_summary(stream: av.stream.Stream) -> dict[str, Any]:
    ctx = stream.codec_context
    return {
        "index": stream.index,
        "type": stream.type,
        "codec": ctx.name if ctx is not None else None,
        "attached_picture": _attached_picture(stream),
    }


def _describe(container: av.container.InputContainer, stream: av.video.stream.VideoStream, out: dict) -> None:
    ctx = stream.codec_context
    out["video_stream_index"] = stream.index
    out["codec"] = ctx.name
    out["profile"] = stream.profile
    out["width"], out["height"] = ctx.width, ctx.height
    out["pixel_format"] = ctx.pix_fmt
    out["fps_avg"] = _float(stream.average_rate)
    out["fps_r"] = _float(stream.base_rate)
    out["header_frames"] = stream.frames or None
    if stream.duration is not None and stream.time_base is not None:
        out["duration_s"] = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        out["duration_s"] = container.duration / av.time_base


def _decode(
    container: av.container.InputContainer, stream: av.video.stream.VideoStream, limits: dict, out: dict
) -> None:
    ctx = stream.codec_context
    ctx.thread_count = limits["decode_threads"]
    # FFmpeg's own guard as well as ours: the decoder refuses to allocate a larger picture mid-stream.
    ctx.options = {"max_pixels": str(limits["max_pixels"])}
    estimate = out.get("header_frames") or round((out.get("duration_s") or 0) * (out.get("fps_avg") or 0))
    acc = FrameStats(limits, stride=max(1, (estimate or 0) // limits["sample_frames"]))
    packets = discarded = decode_errors = 0
    first_error: str | None = None
    with av.logging.Capture(local=False) as logs:
        try:
            for packet in container.demux(stream):
                if packet.size:
                    packets += 1
                    discarded += packet.is_discard
                try:
                    frames = ctx.decode(packet if packet.size else None)
                except av.MemoryError:
                    raise
                except av.FFmpegError as exc:
                    decode_errors += 1
                    first_error = first_error or error_text(exc, [])
                    continue
                for frame in frames:
                    if not acc.add(frame):
                        break
                if acc.stopped:
                    break
        except av.MemoryError:
            raise
        except av.FFmpegError as exc:
            out["demux_error"] = error_text(exc, [])
            _drain(ctx, acc)
    error_logs = [log for log in logs if log[0] <= av.logging.ERROR]
    out.update(
        packets=packets,
        discarded_packets=discarded,
        decode_errors=decode_errors,
        error_logs=len(error_logs),
        first_error=first_error or (log_text(error_logs[0]) if error_logs else None),
        field_order=_FIELD_ORDERS.get(ctx.field_order),
        decoder_name=ctx.codec.name,
    )
    acc.report(out)


def _float(value: Fraction | None) -> float | None:
    return float(value) if value else None


def _drain(ctx: av.video.codeccontext.VideoCodecContext, acc: FrameStats) -> None:
    """After a demux error, take the frames the decoder still holds (reordering delay) into account."""
    try:
        frames = ctx.decode(None)
    except av.MemoryError:
        raise
    except av.FFmpegError:
        return
    for frame in frames:
        if acc.stopped or not acc.add(frame):
            return
