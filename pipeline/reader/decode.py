"""Sparse decoding: only the frames a request depends on, each once per call, pixel-identical to a full
sequential decode.

A stream is described by its frame letters and presentation stamps in decode order (``I`` IDR, ``i``
another I-frame a decoder may start at, ``P``, ``B`` reference B, ``b`` non-reference B; see
:func:`pipeline.transcode.h264.frame_letter`). The dependency closure of one frame is the random access
point it is decoded from, every reference frame between that point and the frame, and the frame
(:func:`closure`). The closures of a call's requests are merged, so an anchor two requests share is decoded
once (:func:`plan_runs`).

FFmpeg's H.264 decoder, fed two anchors with a reference frame skipped between them, sees a gap in
``frame_num`` and drops the frames after it (HEVC has no ``frame_num`` and does not). A merged plan is
therefore cut into runs at every skipped reference frame, each run starting at a random access point, and
the decoder is drained and flushed between runs: every anchor is still decoded once and every frame comes
out right. Frames are converted with one reformatter per stream (its scaling context is kept: 2-6x faster
than a new one per frame, most on AV1's dav1d frames).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import av
import numpy as np
from av.video.reformatter import VideoReformatter

#: Letters of frames later frames may predict from, and of frames a decoder may start at.
REFERENCE_LETTERS = frozenset("IiPB")
KEY_LETTERS = frozenset("Ii")
#: PyAV decoder per stream codec (``foxglove.CompressedVideo`` format names and FFmpeg's own).
DECODERS = {"h264": "h264", "h265": "hevc", "hevc": "hevc", "av1": "libdav1d"}


class UndecodableFrameError(ValueError):
    """A requested frame has no random access point before it (a stream cut before its first keyframe)."""


def closure(letters: str, pts: Sequence[int], position: int) -> list[int]:
    """Decode positions needed to reconstruct ``position`` (decode order): the latest random access point
    at or before it whose presentation stamp is not later than the frame's (an open GOP's leading B-frames
    are decoded from the anchor before the one they follow in decode order), the reference frames between
    them (but an open-GOP anchor's own leading frames, which a decoder starting there skips), and the
    frame itself."""
    if letters[position] in KEY_LETTERS:
        return [position]
    key = position - 1
    while key >= 0 and not (letters[key] in KEY_LETTERS and pts[key] <= pts[position]):
        key -= 1
    if key < 0:
        raise UndecodableFrameError(f"frame {position} has no random access point before it")
    # an open GOP's anchor (``i``) skips its own leading frames when a decoder starts there (HEVC's RASL
    # pictures); after an IDR every frame decodes, leading or not, so all its references are kept
    start = pts[key] if letters[key] == "i" else None
    needed = [key]
    needed += [
        p
        for p in range(key + 1, position)
        if letters[p] in REFERENCE_LETTERS and (start is None or pts[p] >= start)
    ]
    needed.append(position)
    return needed


def plan_runs(
    letters: str, pts: Sequence[int], requested: Iterable[int], *, split_gaps: bool
) -> list[list[int]]:
    """The merged closures of ``requested`` as runs of decode positions (ascending). With ``split_gaps``
    (H.264), a new run starts at a random access point that follows a skipped reference frame."""
    needed = sorted({p for r in set(requested) for p in closure(letters, pts, r)})
    runs: list[list[int]] = []
    for p in needed:
        if runs and not (
            split_gaps and letters[p] in KEY_LETTERS and _skips_reference(letters, runs[-1][-1], p)
        ):
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def _skips_reference(letters: str, after: int, before: int) -> bool:
    return any(letters[p] in REFERENCE_LETTERS for p in range(after + 1, before))


@dataclass
class SparseDecoder:
    """One stream's decoder and reformatter, reused from call to call (not thread-safe).

    ``codec``: a key of :data:`DECODERS`; ``extradata``: the stream's parameter sets when the units carry
    none in band (MP4's avcC/hvcC); ``pixel_format``: what frames are converted to (None: the decoder's).
    """

    codec: str
    pixel_format: str | None = "rgb24"
    extradata: bytes | None = None
    frames_decoded: int = 0
    _context: Any = field(default=None, init=False, repr=False)
    _reformatter: VideoReformatter = field(default_factory=VideoReformatter, init=False, repr=False)

    def _decoder(self) -> Any:
        if self._context is None:
            context = av.CodecContext.create(DECODERS[self.codec], "r")
            if self.extradata:
                context.extradata = self.extradata
            context.thread_count = 1  # a few frames at a time: threads would only add latency
            self._context = context
        return self._context

    def decode(
        self,
        runs: Sequence[Sequence[int]],
        unit: Callable[[int], bytes],
        wanted: Iterable[int],
    ) -> dict[int, np.ndarray]:
        """Decode ``runs`` (decode positions; ``unit(p)`` gives position p's bytes), draining and flushing
        the decoder after each, and return the converted picture of every position in ``wanted`` that came
        out. A decoder that raised is dropped (the next call gets a fresh one)."""
        want = set(wanted)
        out: dict[int, np.ndarray] = {}
        try:
            decoder = self._decoder()
            for run in runs:
                for position in run:
                    packet = av.Packet(unit(position))
                    packet.pts = position
                    self._take(decoder.decode(packet), want, out)
                    self.frames_decoded += 1
                self._take(decoder.decode(None), want, out)
                decoder.flush_buffers()
        except BaseException:
            self._context = None
            raise
        return out

    def _take(self, frames: Iterable[av.VideoFrame], want: set[int], out: dict[int, np.ndarray]) -> None:
        for frame in frames:
            if frame.pts in want:
                out[int(frame.pts)] = self.convert(frame)

    def convert(self, frame: av.VideoFrame) -> np.ndarray:
        """``frame`` as an array in :attr:`pixel_format` through the stream's one reformatter."""
        if self.pixel_format is None:
            return frame.to_ndarray()
        return self._reformatter.reformat(frame, format=self.pixel_format).to_ndarray()
