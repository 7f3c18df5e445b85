"""Video-vendor transform: upright, deinterlaced, cropped, scaled, constant-rate clips cut at scene changes.

Two decodes of the source through FFmpeg filter graphs (``av.filter``):

1. *analysis*: display rotation and interlacing from the decoded frames; ``bbox`` (the box of non-black
   luma per frame; their union over the video is the picture inside any black bars) and ``select``'s
   scene score per frame (FFmpeg's 0-1 score), which gives the scene cuts;
2. *normalise*: ``bwdif`` (deinterlace) → ``transpose``/flips (rotation) → ``crop`` → ``scale`` (to
   ``max_pixels``, area filter) → ``fps`` (constant rate) → yuv420p, split into clips at the cuts, scenes
   longer than ``max_clip_duration_s`` split evenly, pieces shorter than ``min_clip_duration_s`` dropped,
   each clip encoded per profile into MP4 (H.264), written to a staging name and checked.

Only when the whole source has gone through are the clips published (renamed to their final names), then
a ``clips.json`` manifest beside them listing their source time ranges. A failure while clips are encoded
removes every staged clip, so the output folder shows none of them; only a failure among the final renames
can leave earlier clips there without their manifest, and a rerun writes the same bytes over them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from fractions import Fraction
from itertools import pairwise
from pathlib import Path
from typing import Any, cast

import av
import av.filter
from av.video.stream import VideoStream

from pipeline.config import ClipOptions, TranscodeOptions
from pipeline.enums import ReasonCode
from pipeline.media.x264 import X264_THREADS
from pipeline.transcode.cameras import MatrixGuard, encoder_picture, tag_colour
from pipeline.transcode.errors import OutputVerifyError, TranscodeInputError
from pipeline.transcode.profiles import EncoderSettings, fit_size
from pipeline.transcode.publish import publish, sha256_file, staged, staging_path

log = logging.getLogger(__name__)

CLIPS_MANIFEST = "clips.json"
#: bbox: luma at or below 24 (of 255) is black: above video black (16) plus coding noise.
CROP_BLACK_LIMIT = 24
#: Crop only when the bars take at least this fraction of a side: thinner borders are overscan noise.
MIN_CROP_FRACTION = 0.02


@dataclass(frozen=True)
class Analysis:
    """What the first decode found."""

    width: int
    height: int
    rotation_deg: int  # counter-clockwise display rotation (PyAV's VideoFrame.rotation)
    interlaced: bool
    crop: tuple[int, int, int, int] | None  # (w, h, x, y) after rotation, None = no bars
    scene_cuts_s: tuple[float, ...]
    duration_s: float  # from the first frame's start to the last frame's end
    frames: int
    # Source time of the first frame: not 0 in MPEG-TS or in MP4s with an edit list. The default reads
    # manifests written before this field existed (those plans started at 0).
    first_frame_s: float = 0.0


@dataclass(frozen=True)
class ClipPlan:
    index: int
    start_s: float  # source time, inclusive
    end_s: float  # exclusive


@dataclass(frozen=True)
class ClipOutput:
    index: int
    file: str
    start_s: float
    end_s: float
    frames: int
    width: int
    height: int
    sha256: str
    size_bytes: int


def _rotation_filters(rotation_deg: int) -> list[tuple[str, str]]:
    turn = rotation_deg % 360
    if turn == 90:
        return [("transpose", "cclock")]
    if turn == 270:
        return [("transpose", "clock")]
    if turn == 180:
        return [("hflip", ""), ("vflip", "")]
    return []


def _upright_filters(
    analysis: Analysis | None, first: av.VideoFrame, clips: ClipOptions
) -> list[tuple[str, str]]:
    interlaced = analysis.interlaced if analysis else bool(first.interlaced_frame)
    rotation = analysis.rotation_deg if analysis else int(first.rotation)
    chain: list[tuple[str, str]] = []
    if clips.deinterlace and interlaced:
        chain.append(("bwdif", "mode=send_frame:parity=auto:deint=all"))
    if clips.apply_rotation:
        chain += _rotation_filters(rotation)
    return chain


def _run_graph(source: Path, make_chain: Any) -> Iterator[av.VideoFrame]:
    """Decode ``source`` through the filter chain ``make_chain(first_frame)`` builds; yields output frames."""
    try:
        container = av.open(str(source))
    except av.FFmpegError as exc:
        raise TranscodeInputError(ReasonCode.CONTAINER_ERROR, f"{source.name}: {exc}") from None
    with container:
        if not container.streams.video:
            raise TranscodeInputError(ReasonCode.NO_VIDEO_STREAM, f"{source.name}: no video stream")
        stream = container.streams.video[0]
        stream.codec_context.thread_count = 1
        graph = None
        matrices = MatrixGuard(source.name)  # the graph's source names the first picture's matrix
        try:
            for frame in container.decode(stream):
                matrices.check(frame)
                if graph is None:
                    graph = av.filter.Graph()
                    node = _buffer(graph, stream, frame)
                    for name, args in make_chain(frame):
                        nxt = graph.add(name, args) if args else graph.add(name)
                        node.link_to(nxt)
                        node = nxt
                    node.link_to(graph.add("buffersink"))
                    graph.configure()
                graph.push(frame)
                yield from _drain(graph)
        except av.FFmpegError as exc:
            raise TranscodeInputError(ReasonCode.DECODE_ERROR, f"{source.name}: {exc}") from None
        if graph is None:
            raise TranscodeInputError(ReasonCode.TOO_FEW_FRAMES, f"{source.name}: no frame decodes")
        graph.push(None)
        yield from _drain(graph)


def _buffer(graph: av.filter.Graph, stream: av.video.stream.VideoStream, first: av.VideoFrame) -> Any:
    """The graph's source, as ``Graph.add_buffer(template=stream)`` makes it but for the colour matrix and
    range of the stream's first frame, which that one leaves unset: the frames out of the graph would
    name neither, a BT.709 camera's then read as BT.601 and a full-range one's as limited range."""
    return graph.add(
        "buffer",
        video_size=f"{stream.width}x{stream.height}",
        pix_fmt=stream.format.name,
        time_base=str(stream.time_base),
        pixel_aspect="1/1",
        colorspace=str(int(first.colorspace)),
        range=str(int(first.color_range)),
    )


def _drain(graph: av.filter.Graph) -> Iterator[av.VideoFrame]:
    while True:
        try:
            frame = graph.pull()
            if isinstance(frame, av.VideoFrame):  # a video graph: audio frames never come out
                yield frame
        except (av.BlockingIOError, av.EOFError):
            return


def analyse(source: Path, clips: ClipOptions) -> Analysis:
    """First decode: rotation, interlacing, black bars and scene cuts of ``source``."""
    first: dict[str, Any] = {}

    def chain(frame: av.VideoFrame) -> list[tuple[str, str]]:
        first.update(rotation=int(frame.rotation), interlaced=bool(frame.interlaced_frame))
        return [
            *_upright_filters(None, frame, clips),
            ("bbox", f"min_val={CROP_BLACK_LIMIT}"),
            ("select", r"gte(scene\,0)"),
        ]

    cuts: list[float] = []
    box: list[int] | None = None  # x1, y1, x2, y2 (inclusive) of non-black luma over all frames
    frames = 0
    first_time = last_time = previous_time = 0.0
    width = height = 0
    for frame in _run_graph(source, chain):
        frames += 1
        width, height = frame.width, frame.height
        previous_time, last_time = last_time, float(frame.time or 0.0)
        if frames == 1:
            first_time = last_time
        meta = frame.metadata
        score = float(meta.get("lavfi.scene_score", 0.0))
        if frames > 1 and score >= clips.scene_cut_threshold:
            cuts.append(last_time)
        if "lavfi.bbox.x1" in meta:
            found = [int(meta[f"lavfi.bbox.{k}"]) for k in ("x1", "y1", "x2", "y2")]
            box = (
                found
                if box is None
                else [
                    min(box[0], found[0]),
                    min(box[1], found[1]),
                    max(box[2], found[2]),
                    max(box[3], found[3]),
                ]
            )
    crop = _crop(box, width, height)
    period = last_time - previous_time if frames > 1 else 0.0  # the last frame lasts one period too
    return Analysis(
        width=width,
        height=height,
        rotation_deg=first.get("rotation", 0),
        interlaced=first.get("interlaced", False),
        crop=crop,
        scene_cuts_s=tuple(cuts),
        duration_s=last_time + period - first_time,
        frames=frames,
        first_frame_s=first_time,
    )


def _crop(box: list[int] | None, width: int, height: int) -> tuple[int, int, int, int] | None:
    """(w, h, x, y) of the picture inside black bars, even-aligned; None when there are no real bars."""
    if box is None:
        return None  # every frame black: nothing to crop to (the pre-gate quarantines blank video)
    x1, y1 = box[0] + box[0] % 2, box[1] + box[1] % 2
    x2, y2 = box[2] + 1, box[3] + 1
    w, h = (x2 - x1) - (x2 - x1) % 2, (y2 - y1) - (y2 - y1) % 2
    if w <= 0 or h <= 0 or (w >= width * (1 - MIN_CROP_FRACTION) and h >= height * (1 - MIN_CROP_FRACTION)):
        return None
    return w, h, x1, y1


def plan_clips(analysis: Analysis, clips: ClipOptions) -> list[ClipPlan]:
    """Scenes between cuts, long ones split evenly into pieces ≤ max, short pieces dropped."""
    first = analysis.first_frame_s
    bounds = [first, *analysis.scene_cuts_s, first + analysis.duration_s]
    plans: list[ClipPlan] = []
    for start, end in pairwise(bounds):
        length = end - start
        pieces = max(1, math.ceil(length / clips.max_clip_duration_s - 1e-9))
        for k in range(pieces):
            # length * k / pieces, not k * (length / pieces): the last bound is then exactly ``end``
            a, b = start + length * k / pieces, start + length * (k + 1) / pieces
            # A scene of exactly the minimum (30 frames at 30 fps for 1 s) is kept: frame sums come out a hair
            # under it (1.9999999999999998 - 1.0), which dropped the demo's first clip.
            if b - a >= clips.min_clip_duration_s - CUT_TOLERANCE_S:
                plans.append(ClipPlan(len(plans), a, b))
    return plans


#: Frame times and cut points are sums of float fractions: a frame on a cut can come out a hair either side
#: of it. A microsecond is far under any frame period, so a frame on a cut always opens the later clip.
CUT_TOLERANCE_S = 1e-6


def clip_of(plans: list[ClipPlan], t: float) -> int | None:
    """The clip a frame at source time ``t`` belongs to (None between scenes dropped as too short)."""
    return next(
        (p.index for p in plans if p.start_s - CUT_TOLERANCE_S <= t < p.end_s - CUT_TOLERANCE_S), None
    )


def normalised_frames(source: Path, analysis: Analysis, options: TranscodeOptions) -> Iterator[av.VideoFrame]:
    """Second decode: upright, deinterlaced, cropped, scaled, constant-rate yuv420p frames (``frame.time``
    is source time)."""
    clips = options.clips or ClipOptions()
    w, h = (
        (analysis.crop[0], analysis.crop[1])
        if analysis.crop and clips.crop_black_bars
        else (analysis.width, analysis.height)
    )
    out_w, out_h = fit_size(w, h, options.max_pixels)
    fps = Fraction(clips.fps).limit_denominator(1001)

    def chain(frame: av.VideoFrame) -> list[tuple[str, str]]:
        steps = _upright_filters(analysis, frame, clips)
        if analysis.crop and clips.crop_black_bars:
            cw, ch, cx, cy = analysis.crop
            steps.append(("crop", f"{cw}:{ch}:{cx}:{cy}"))
        steps += [
            ("scale", f"{out_w}:{out_h}:flags=area"),
            ("fps", f"fps={fps.numerator}/{fps.denominator}"),
            ("format", "yuv420p"),
        ]
        return steps

    yield from _run_graph(source, chain)


def transform_video(
    source: Path, out_dir: Path, options: TranscodeOptions, *, staging_dir: Path | None = None
) -> list[ClipOutput]:
    """Transform one vendor video into clips under ``out_dir`` (see the module docstring)."""
    clips = options.clips or ClipOptions()
    analysis = analyse(source, clips)
    plans = plan_clips(analysis, clips)
    if not plans:
        raise TranscodeInputError(
            ReasonCode.TOO_FEW_FRAMES,
            f"{source.name}: no scene lasts {clips.min_clip_duration_s} s (duration {analysis.duration_s:.2f} s)",
        )
    settings = EncoderSettings.from_options(options)
    fps = Fraction(clips.fps).limit_denominator(1001)
    outputs: list[ClipOutput] = []
    done: list[_ClipWriter] = []  # verified clips still under their staging names
    writer: _ClipWriter | None = None
    current = -1
    try:
        for frame in normalised_frames(source, analysis, options):
            t = float(frame.time or 0.0)
            index = clip_of(plans, t)
            if index != current and writer is not None:
                done.append(writer)
                outputs.append(writer.close())
                writer = None
            current = index if index is not None else -1
            if index is None:
                continue
            if writer is None:
                writer = _ClipWriter(
                    out_dir, plans[index], frame.width, frame.height, fps, settings, staging_dir
                )
            writer.add(frame)
        if writer is not None:
            done.append(writer)
            outputs.append(writer.close())
            writer = None
        manifest = {
            "source": source.name,
            "analysis": asdict(analysis),
            "fps": str(fps),
            "profile": settings.describe(),
            "clips": [asdict(o) for o in outputs],
        }
        final = out_dir / CLIPS_MANIFEST
        with staged(final, staging_dir) as path:
            path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            for clip in done:
                publish(clip.path, clip.final)
            publish(path, final)  # last: a manifest means every clip it lists is in place
    except BaseException:
        if writer is not None:
            writer.abort()
        for clip in done:
            clip.path.unlink(missing_ok=True)  # staged only; published ones stay (same bytes on a rerun)
        raise
    log.info(
        "%s: %d clips (cuts at %s s)", source.name, len(outputs), [round(c, 2) for c in analysis.scene_cuts_s]
    )
    return outputs


class _ClipWriter:
    """One MP4 clip being encoded into a staging file (published by the caller once all clips are done)."""

    def __init__(
        self,
        out_dir: Path,
        plan: ClipPlan,
        width: int,
        height: int,
        fps: Fraction,
        settings: EncoderSettings,
        staging_dir: Path | None,
    ) -> None:
        self.plan = plan
        self.final = out_dir / f"clip_{plan.index:03d}.mp4"
        self.path = staging_path(self.final, staging_dir)
        self.container = av.open(str(self.path), "w", format="mp4")
        self.stream = cast(VideoStream, self.container.add_stream(settings.encoder_name, rate=fps))
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = "yuv420p"
        self.stream.codec_context.thread_count = X264_THREADS
        self.stream.options = dict[str, object](settings.encoder_options())
        self.fps = fps
        self.frames = 0

    def add(self, frame: av.VideoFrame) -> None:
        if self.frames == 0:  # before the encoder opens: the matrix goes into its parameter sets
            tag_colour(self.stream.codec_context, frame)
        out = encoder_picture(frame, self.stream.width, self.stream.height)
        out.pts = self.frames
        out.time_base = 1 / self.fps
        out.pict_type = av.video.frame.PictureType.NONE
        self.container.mux(self.stream.encode(out))
        self.frames += 1

    def abort(self) -> None:
        """Drop the clip being written (the source failed part-way)."""
        with contextlib.suppress(av.FFmpegError, OSError):
            self.container.close()
        self.path.unlink(missing_ok=True)

    def close(self) -> ClipOutput:
        """Finish the staged clip, check its frame count and hash it; it stays under its staging name."""
        try:
            self.container.mux(self.stream.encode(None))
            self.container.close()
            counted = count_frames(self.path)
            if counted != self.frames:
                raise OutputVerifyError(str(self.path), f"{counted} frames read back, {self.frames} written")
            sha256, size = sha256_file(self.path)
        except BaseException:
            self.path.unlink(missing_ok=True)
            raise
        return ClipOutput(
            index=self.plan.index,
            file=self.final.name,
            start_s=self.plan.start_s,
            end_s=self.plan.end_s,
            frames=self.frames,
            width=self.stream.width,
            height=self.stream.height,
            sha256=sha256,
            size_bytes=size,
        )


def count_frames(path: Path) -> int:
    """Video packets in an MP4 (each one frame): a cheap read-back of a written clip."""
    with av.open(str(path)) as container:
        return sum(1 for p in container.demux(container.streams.video[0]) if p.size)


def read_manifest(out_dir: Path) -> dict[str, Any]:
    return json.loads((out_dir / CLIPS_MANIFEST).read_text())
