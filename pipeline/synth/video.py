"""One synthetic vendor video clip: MP4 (H.264) with the frame index drawn into every frame.

A clip has a few hard scene cuts (a new :class:`SceneGenerator` scene each), and can be written really
interlaced (two fields sampled half a frame apart, coded as fields with top field first), all black, or
with a 90-degree display rotation in the container. PyAV writes the display matrix itself
(``VideoStream.set_display_rotation``), so no MP4 patching is needed.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Literal

import av
import av.video.codeccontext
import numpy as np

from pipeline.media.framecode import FrameCode
from pipeline.media.x264 import X264_THREADS
from pipeline.synth.encode import H264Settings
from pipeline.synth.scene import SceneGenerator, black_frame, yuv420p_buffer

log = logging.getLogger(__name__)

#: How FFmpeg's MP4 muxer takes a creation_time tag (UTC; the header keeps whole seconds).
CREATION_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.000000Z"
# FFmpeg's AVFieldOrder value for "top field coded and displayed first".
AV_FIELD_TT = 2


ClipColour = Literal["bt601", "bt709"]
#: AVColorSpace, AVColorPrimaries and AVColorTransferCharacteristic of BT.709 (all 1), AVColorRange MPEG.
_BT709, _LIMITED = 1, 1
#: The same three of SMPTE 170M, BT.601 as an SD camera names it (all 6).
_SMPTE170M = 6


def tag_colours(context: av.video.codeccontext.VideoCodecContext, colour: ClipColour) -> None:
    """Say ``colour`` in the encoder's VUI (and so in the MP4's ``colr`` box); BT.601 stays untagged."""
    if colour == "bt709":
        context.colorspace = context.color_primaries = context.color_trc = _BT709
        context.color_range = _LIMITED


@dataclass(frozen=True)
class ClipMedia:
    """How the vendor's clips are encoded; the same for every clip of a drop."""

    width: int = 320
    height: int = 240
    fps: Fraction = Fraction(30)
    # A vendor's camera or phone: B-frames allowed, 2 s GOPs.
    h264: H264Settings = field(
        default_factory=lambda: H264Settings(preset="veryfast", gop_frames=60, bframes=2)
    )
    #: What the stream says its samples mean: ``bt601`` writes no colour tags (read as BT.601, as SD
    #: cameras record), ``bt709`` tags matrix, primaries and transfer BT.709, limited range (an HD camera or
    #: phone). The samples are the same either way, so the colours a reader shows differ.
    colour: ClipColour = "bt601"


@dataclass(frozen=True)
class ClipSpec:
    """What makes one clip different from another."""

    clip_id: str
    relpath: str
    seconds: float
    seed: int
    scene_cuts: int
    camera_id: int = 0
    #: Written as the container's creation_time, as cameras and phones do (None: left out).
    captured_at: datetime | None = None


@dataclass(frozen=True)
class ClipTweaks:
    """Content defects; the default is a clean clip."""

    interlaced: bool = False
    all_black: bool = False
    rotation_deg: int = 0
    #: Matrix, primaries and transfer the VUI names (limited range) instead of what ``ClipMedia.colour``
    #: writes.
    colour_tags: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class ClipResult:
    frames: int
    scene_cut_frames: tuple[int, ...]
    details: dict[str, object]


def scene_cut_frames(spec: ClipSpec, frames: int) -> tuple[int, ...]:
    """Frames where a new scene starts: at least a second apart and away from both ends when possible."""
    if spec.scene_cuts <= 0 or frames < 4:
        return ()
    rng = np.random.default_rng([spec.seed, 0xC07])
    candidates = np.arange(1, frames)
    count = min(spec.scene_cuts, len(candidates))
    # Spread cuts over equal slices of the clip so they never bunch up.
    edges = np.linspace(1, frames, count + 1)
    cuts = [int(rng.integers(int(edges[i]), max(int(edges[i]) + 1, int(edges[i + 1])))) for i in range(count)]
    return tuple(sorted(set(cuts)))


def write_clip(path: Path, spec: ClipSpec, media: ClipMedia, tweaks: ClipTweaks | None = None) -> ClipResult:
    """Write one MP4 clip to ``path`` (via a temporary name)."""
    tweaks = tweaks or ClipTweaks()
    frames = max(1, math.floor(spec.seconds * media.fps))
    cuts = scene_cut_frames(spec, frames)
    settings = media.h264
    if tweaks.interlaced:
        settings = H264Settings(
            preset=settings.preset,
            crf=settings.crf,
            gop_frames=settings.gop_frames,
            bframes=settings.bframes,
            interlaced=True,
        )
    tmp = path.with_name(path.name + ".part")
    path.parent.mkdir(parents=True, exist_ok=True)
    scene = SceneGenerator(media.width, media.height, seed=spec.seed)
    buf = yuv420p_buffer(media.width, media.height)[0]
    second = yuv420p_buffer(media.width, media.height)[0]
    black = black_frame(media.width, media.height)
    h, w = media.height, media.width
    with av.open(str(tmp), "w", format="mp4") as container:
        if spec.captured_at is not None:
            container.metadata["creation_time"] = spec.captured_at.astimezone(UTC).strftime(
                CREATION_TIME_FORMAT
            )
        stream = container.add_stream("libx264", rate=media.fps)
        stream.width = w
        stream.height = h
        stream.pix_fmt = "yuv420p"
        stream.codec_context.thread_count = X264_THREADS
        tag_colours(stream.codec_context, media.colour)
        if tweaks.colour_tags is not None:
            context = stream.codec_context
            context.colorspace, context.color_primaries, context.color_trc = tweaks.colour_tags
            context.color_range = _LIMITED
        stream.options = dict[str, object](settings.x264_options())
        if tweaks.interlaced:
            stream.codec_context.field_order = AV_FIELD_TT
        if tweaks.rotation_deg:
            stream.set_display_rotation(tweaks.rotation_deg)
        scene_id = 0
        for k in range(frames):
            if k in cuts:
                scene_id += 1
            t_s = float(k / media.fps)
            if tweaks.all_black:
                yuv = black
            else:
                code = FrameCode(k, spec.camera_id)
                yuv = scene.render(t_s, grain_index=k, scene_id=scene_id, code=code, out=buf)
                if tweaks.interlaced:
                    # The bottom field is sampled half a frame later: real interlaced motion (combing).
                    half = float(1 / (2 * media.fps))
                    late = scene.render(
                        t_s + half, grain_index=k + 1, scene_id=scene_id, code=code, out=second
                    )
                    _weave_bottom_field(yuv, late, w, h)
            frame = av.VideoFrame.from_ndarray(yuv, format="yuv420p")
            frame.pts = k
            frame.time_base = 1 / media.fps
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    os.replace(tmp, path)
    details: dict[str, object] = {"frames": frames, "scene_cut_frames": list(cuts)}
    if tweaks.interlaced:
        details["field_order"] = "tt"  # top field first
    if tweaks.rotation_deg:
        details["rotation_deg"] = tweaks.rotation_deg
    log.debug("wrote %s: %d frames, cuts at %s", path, frames, cuts)
    return ClipResult(frames=frames, scene_cut_frames=cuts, details=details)


def _weave_bottom_field(top: np.ndarray, bottom: np.ndarray, width: int, height: int) -> None:
    """Copy the odd lines (bottom field) of ``bottom`` into ``top``, luma and chroma, in place."""
    luma = width * height
    top_flat, bottom_flat = top.reshape(-1), bottom.reshape(-1)
    top_flat[:luma].reshape(height, width)[1::2] = bottom_flat[:luma].reshape(height, width)[1::2]
    for start, stop in ((luma, luma * 5 // 4), (luma * 5 // 4, luma * 3 // 2)):
        t = top_flat[start:stop].reshape(height // 2, width // 2)
        t[1::2] = bottom_flat[start:stop].reshape(height // 2, width // 2)[1::2]


def reencode_clip(src: Path, dst: Path, *, scale: float, crf: int, gop_frames: int) -> int:
    """Decode ``src`` and encode it again at ``scale`` of its size (even dimensions), ``crf`` and GOP, without
    B-frames, as another vendor's or a re-export's copy of the same footage; returns the frames written."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4") as out:
        source = inp.streams.video[0]
        rate = source.average_rate or Fraction(30)
        stream = out.add_stream("libx264", rate=rate)
        stream.width = max(2, int(source.codec_context.width * scale) // 2 * 2)
        stream.height = max(2, int(source.codec_context.height * scale) // 2 * 2)
        stream.pix_fmt = "yuv420p"
        # the copy says what the original says: the same footage, shown in the same colours
        for tag in ("colorspace", "color_primaries", "color_trc", "color_range"):
            setattr(stream.codec_context, tag, getattr(source.codec_context, tag))
        frame_time = Fraction(1) / Fraction(rate)
        stream.options = {"crf": str(crf), "g": str(gop_frames), "bf": "0", "threads": str(X264_THREADS)}
        for frame in inp.decode(source):
            small = frame.reformat(width=stream.width, height=stream.height, format="yuv420p")
            small.pts, small.time_base = written, frame_time
            out.mux(stream.encode(small))
            written += 1
        out.mux(stream.encode(None))
    return written


def write_spliced_clip(path: Path, spec: ClipSpec, media: ClipMedia) -> ClipResult:
    """One clip spliced from two recordings of the same footage: its first half as ``media`` says, its
    second from a camera whose parameter sets name the other matrix (a recorder that switched colour modes,
    or two files cut together without re-encoding): BT.709, or SMPTE 170M after BT.709 (named: FFmpeg keeps
    the matrix an earlier SPS named when a later one names none). The second half's SPS travel in its
    samples, so a decoder reads its pictures in the other matrix from the splice on, while the container's
    header names only the first's. Both are encoded with a keyframe at the splice, without B-frames (FFmpeg tags the
    B-frames it outputs after the new SPS arrived with it, though they were coded before), so the packets
    join without a gap and the first picture in the other matrix is the splice's."""
    frames = max(2, math.floor(spec.seconds * media.fps))
    at = frames // 2
    gop = replace(media.h264, gop_frames=at, bframes=0, repeat_headers=True)
    first, second = (path.with_name(f"{path.name}.{k}.part") for k in (1, 2))
    try:
        result = write_clip(first, spec, replace(media, h264=gop))
        other = (_SMPTE170M,) * 3 if media.colour == "bt709" else (_BT709,) * 3
        write_clip(second, spec, replace(media, h264=gop), ClipTweaks(colour_tags=other))
        tmp = path.with_name(path.name + ".part")
        with av.open(str(first)) as a, av.open(str(second)) as b, av.open(str(tmp), "w", format="mp4") as out:
            stream = out.add_stream_from_template(a.streams.video[0])
            for source, keep_after in ((a, False), (b, True)):
                video = source.streams.video[0]
                reached = False  # the splice's keyframe passed, in decode order
                for packet in source.demux(video):
                    if packet.dts is None:
                        continue  # the demuxer's end-of-stream packet
                    reached = reached or (
                        packet.is_keyframe and _frame_of(packet, video.time_base, media.fps) == at
                    )
                    if reached == keep_after:
                        packet.stream = stream
                        out.mux(packet)
        os.replace(tmp, path)
    finally:
        for part in (first, second, path.with_name(path.name + ".part")):
            part.unlink(missing_ok=True)
    after = "smpte170m" if media.colour == "bt709" else "bt709"
    details = dict(result.details) | {"colour_change_frame": at, "colour_after": after}
    return ClipResult(frames=result.frames, scene_cut_frames=result.scene_cut_frames, details=details)


def _frame_of(packet: av.Packet, time_base: Fraction | None, fps: Fraction) -> int:
    if packet.pts is None or time_base is None:
        raise ValueError("a muxed video packet without a timestamp or time base")
    return round(packet.pts * time_base * fps)
