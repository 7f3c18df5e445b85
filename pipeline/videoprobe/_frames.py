"""Runs inside the sandboxed worker only: per-frame bookkeeping and the pixel statistics of sampled frames."""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import av
import numpy as np
from av.video.reformatter import VideoReformatter

PICTURE_TYPES = {0: "none", 1: "I", 2: "P", 3: "B", 4: "S", 5: "SI", 6: "SP", 7: "BI"}
_PROC_URL = re.compile(r"file:/proc/self/fd/\d+")
# Error texts are stored in the catalog: long enough for FFmpeg's message and its last log line.
_MAX_MESSAGE_CHARS = 400


def error_text(exc: BaseException, logs: list[tuple[int, str, str]]) -> str:
    text = _PROC_URL.sub("<input>", str(exc))
    errors = [log for log in logs if log[0] <= av.logging.ERROR]
    if errors and "last error log" not in text:
        text = f"{text} ({log_text(errors[-1])})"
    return text[:_MAX_MESSAGE_CHARS]


def log_text(log: tuple[int, str, str]) -> str:
    return f"[{log[1]}] {log[2].strip()}"[:_MAX_MESSAGE_CHARS]


@dataclass
class FrameStats:
    """Per-frame bookkeeping; pixel statistics only on every ``stride``-th frame, up to the sample budget."""

    limits: dict[str, Any]
    stride: int
    count: int = 0
    stopped: bool = False
    pts: list[int] = field(default_factory=list)
    time_base: Fraction | None = None
    frames_without_pts: int = 0
    last_key: int | None = None
    key_count: int = 0
    key_intervals: list[int] = field(default_factory=list)
    picture_types: dict[str, int] = field(default_factory=dict)
    interlaced: int = 0
    corrupt: int = 0
    sizes: list[tuple[int, int]] = field(default_factory=list)
    sampled: int = 0
    blank: int = 0
    luma_sum: float = 0.0
    bars: np.ndarray | None = None  # top, bottom, left, right as fractions; min over non-blank samples
    first: dict[str, Any] = field(default_factory=dict)
    sample_error: str | None = None
    # One reformatter for the whole file: it keeps its scaler context, which costs ~6 ms to build per frame.
    reformatter: VideoReformatter = field(default_factory=VideoReformatter)

    def add(self, frame: av.VideoFrame) -> bool:
        """Account for one decoded frame; False (and ``stopped``) when the frame is over ``max_pixels``."""
        size = (frame.width, frame.height)
        if size not in self.sizes:
            self.sizes.append(size)
        if size[0] * size[1] > self.limits["max_pixels"]:
            # A stream that grows mid-way (a new sequence header): stop before touching its pixels.
            self.stopped = True
            self.first["resolution_refused"] = True
            return False
        if self.count == 0:
            self._first_frame(frame)
        if frame.pts is None:
            self.frames_without_pts += 1
        else:
            self.pts.append(frame.pts)
            self.time_base = self.time_base or frame.time_base
        if frame.key_frame:
            if self.last_key is not None:
                self.key_intervals.append(self.count - self.last_key)
            self.last_key = self.count
            self.key_count += 1
        kind = PICTURE_TYPES.get(int(frame.pict_type), str(frame.pict_type))
        self.picture_types[kind] = self.picture_types.get(kind, 0) + 1
        self.interlaced += frame.interlaced_frame
        self.corrupt += frame.is_corrupt
        if (
            self.count % self.stride == 0
            and self.sampled < self.limits["sample_frames"]
            and not self.sample_error
        ):
            try:
                self._sample(frame)
            except av.FFmpegError as exc:
                # The scaler reports a failed allocation as EAGAIN or ENOMEM: that is the memory limit.
                if exc.errno in (errno.EAGAIN, errno.ENOMEM):
                    raise MemoryError(f"converting a frame for pixel statistics: {exc}") from exc
                self.sample_error = error_text(exc, [])
        self.count += 1
        return True

    def _first_frame(self, frame: av.VideoFrame) -> None:
        self.first["leading_keyframe"] = bool(frame.key_frame)
        self.first["leading_picture_type"] = PICTURE_TYPES.get(int(frame.pict_type))
        rotation = int(frame.rotation)
        self.first["rotation_deg"] = 180 if rotation == -180 else rotation
        side_data: Any = frame.side_data  # a Mapping of SideData buffers (the stub types it as one buffer)
        matrix = side_data.get("DISPLAYMATRIX")
        reflected = False
        if matrix is not None:
            # 3x3 matrix of int32 (16.16 fixed point); a negative 2x2 determinant means a mirror.
            m = [int(v) for v in np.frombuffer(bytes(matrix), dtype=np.int32)[:5]]
            reflected = m[0] * m[4] - m[1] * m[3] < 0
        self.first["reflected"] = reflected

    def _sample(self, frame: av.VideoFrame) -> None:
        edge = self.limits["sample_edge_px"]
        scale = min(1.0, edge / max(frame.width, frame.height))
        width, height = max(2, round(frame.width * scale)), max(2, round(frame.height * scale))
        # Grey is full-range luma whatever the source's range or bit depth.
        grey = self.reformatter.reformat(
            frame, width=width, height=height, format="gray", interpolation="AREA"
        )
        luma = grey.to_ndarray().astype(np.float32)
        self.sampled += 1
        self.luma_sum += float(luma.mean())
        if float(luma.std()) <= self.limits["blank_luma_std_max"]:
            self.blank += 1
            return
        black = self.limits["black_luma_max"]
        flat = self.limits["blank_luma_std_max"]
        rows = (luma.mean(axis=1) <= black) & (luma.std(axis=1) <= flat)
        cols = (luma.mean(axis=0) <= black) & (luma.std(axis=0) <= flat)
        bars = np.array(
            [_run(rows) / height, _run(rows[::-1]) / height, _run(cols) / width, _run(cols[::-1]) / width]
        )
        self.bars = bars if self.bars is None else np.minimum(self.bars, bars)

    def report(self, out: dict[str, Any]) -> None:
        out.update(self.first)
        out["decoded_frames"] = self.count
        out["picture_types"] = self.picture_types
        out["interlaced_frames"] = self.interlaced
        out["corrupt_frames"] = self.corrupt
        out["resolutions"] = self.sizes
        intervals = self.key_intervals
        out["keyframes"] = {
            "count": self.key_count,
            "interval_min": min(intervals) if intervals else None,
            "interval_max": max(intervals) if intervals else None,
            "interval_mean": sum(intervals) / len(intervals) if intervals else None,
        }
        out["sampled_frames"] = self.sampled
        out["sample_error"] = self.sample_error
        out["blank_frames"] = self.blank
        if self.sampled:
            out["blank_ratio"] = self.blank / self.sampled
            out["mean_luma"] = self.luma_sum / self.sampled
        if self.bars is not None:
            out["letterbox"] = dict(
                zip(("top", "bottom", "left", "right"), map(float, self.bars), strict=True)
            )
        self._report_timing(out)

    def _report_timing(self, out: dict[str, Any]) -> None:
        timing: dict[str, Any] = {"frames_without_pts": self.frames_without_pts}
        if self.pts and self.time_base:
            pts = np.sort(np.asarray(self.pts, dtype=np.int64))
            unique = np.unique(pts)
            timing["duplicate_pts"] = int(pts.size - unique.size)
            intervals = np.diff(unique).astype(np.float64) * float(self.time_base)
            if unique.size >= 2:
                span_s = float(unique[-1] - unique[0]) * float(self.time_base)
                out["fps_measured"] = (unique.size - 1) / span_s
            if intervals.size:
                median = float(np.median(intervals))
                # An interval near a whole multiple (>= 2) of the median is a gap of dropped frames in a
                # constant-rate stream; anything else off the median is a rate change.
                ratio = intervals / median
                nearest = np.maximum(np.rint(ratio), 1.0)
                off = np.abs(ratio - nearest) > self.limits["vfr_tolerance"]
                gaps = ~off & (nearest >= 2)
                timing.update(
                    interval_min_s=float(intervals.min()),
                    interval_max_s=float(intervals.max()),
                    interval_median_s=median,
                    off_median_fraction=float(off.mean()),
                    dropped_frame_gaps=int(gaps.sum()),
                )
                # Two intervals cannot tell a rate change from jitter.
                if intervals.size >= 3:
                    out["variable_frame_rate"] = float(off.mean()) > self.limits["vfr_max_off_fraction"]
        out["timing"] = timing


def _run(mask: np.ndarray) -> int:
    """Length of the leading run of True values."""
    misses = np.flatnonzero(~mask)
    return int(mask.size if misses.size == 0 else misses[0])
