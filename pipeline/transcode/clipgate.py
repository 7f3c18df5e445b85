"""The post-gate's checks of a video vendor's clips (see :mod:`pipeline.transcode.clips`).

* ``decode`` – every clip decodes end to end, with the frame count its manifest entry says;
* ``gop`` – keyframes exactly every ``gop_frames`` frames, picture types the profile's;
* ``duration`` – constant frame rate, and each clip between the minimum and maximum clip length;
* ``psnr`` – sampled clip frames against the same normalised source frames, luma and chroma;
* ``colour`` – the sampled clip frames show the source's colours: read in the matrix the source names,
  mean chroma within ``max_chroma_shift_levels`` (see :mod:`pipeline.transcode.postgate`);
* ``sha256`` – each clip's digest equals the manifest's.

Each clip is decoded once, frame by frame in step with one decode of the source (the frames each was made
from), keeping picture types and frame times: the gate holds one picture of each at a time, however many
clips a video gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import pairwise
from pathlib import Path
from typing import Any

import av
import numpy as np

from pipeline.config import ClipOptions, QualityPost, TranscodeOptions
from pipeline.enums import ReasonCode
from pipeline.transcode.cameras import colour_reading, encoder_picture
from pipeline.transcode.clips import Analysis, ClipPlan, clip_of, normalised_frames, read_manifest
from pipeline.transcode.h264 import avcc_entropy_coders, coder_mismatch
from pipeline.transcode.h265 import hvcc_has_parameter_sets
from pipeline.transcode.postgate import (
    CheckOutcome,
    ColourFindings,
    Comparison,
    Sample,
    below_threshold,
    failed_check,
)
from pipeline.transcode.profiles import EncoderSettings, expected_letters
from pipeline.transcode.publish import sha256_file


@dataclass
class _ClipScan:
    """What one decode of a clip keeps for the checks: no pictures (those are compared as they decode)."""

    letters: list[str] = field(default_factory=list)  # picture type per frame, "I" for keyframes
    times_s: list[float] = field(default_factory=list)
    extradata: bytes = b""
    error: str | None = None  # why the clip did not open, or its decode stopped before the end


class _ClipDecode:
    """One clip decoded a frame at a time, as the source decode reaches the frames it was made from.

    Picture types, frame times and parameter sets are kept for the checks; of the pictures, only the
    position is, so that the gate holds one clip picture at a time however many clips a video gives. The
    ``samples`` positions to compare are spread evenly over the clip's frame count as its container lists
    it (its sample table), falling back on the manifest's; a clip that decodes to another count fails the
    decode check anyway. Opening raises what :func:`av.open` raises, or ``IndexError`` without a video
    stream.
    """

    def __init__(self, path: Path, samples: int, listed_frames: int) -> None:
        self.scan = _ClipScan()
        self._container: Any = av.open(str(path))
        try:
            stream = self._container.streams.video[0]
        except IndexError:
            self._container.close()
            raise
        n = stream.frames or listed_frames
        self.wanted = (
            set(np.linspace(0, n - 1, min(samples, n)).round().astype(int).tolist()) if n > 0 else set()
        )
        self._stream = stream
        self._frames: Iterator[av.VideoFrame] | None = self._container.decode(stream)

    def next(self) -> tuple[int, av.VideoFrame] | None:
        """The clip's next picture and its position in the clip; None once the clip ended or broke off."""
        if self._frames is None:
            return None
        try:
            frame = next(self._frames)
        except StopIteration:
            self._close()
            return None
        except (av.FFmpegError, OSError) as exc:
            self.scan.error = str(exc)
            self._close()
            return None
        self.scan.letters.append(
            "I" if frame.key_frame else av.video.frame.PictureType(int(frame.pict_type)).name
        )
        self.scan.times_s.append(float(frame.time or 0.0))
        return len(self.scan.letters) - 1, frame

    def finish(self) -> _ClipScan:
        """Decode the rest of the clip (frames no source frame reached) and close it."""
        while self.next() is not None:
            pass
        return self.scan

    def _close(self) -> None:
        self.scan.extradata = bytes(self._stream.codec_context.extradata or b"")
        self.close()

    def close(self) -> None:
        """Close the clip's file, decoded to its end or not."""
        self._container.close()
        self._frames = None


class _Clips:
    """The clips of one manifest, each decoded once, in step with the source decode (:func:`_compare`)."""

    def __init__(self, out_dir: Path, entries: list[dict[str, Any]], samples: int) -> None:
        self._out_dir = out_dir
        self._entries = {int(e["index"]): e for e in entries}
        self._samples = samples
        self._open: dict[int, _ClipDecode] = {}
        self.scans: dict[int, _ClipScan] = {}  # clips decoded to their end, broken off or not opened

    def decode(self, index: int) -> _ClipDecode | None:
        """The open decode of clip ``index``, opened on first use; None for an unknown, unreadable or
        finished clip. Clips before ``index`` are finished and closed: the source reaches clips in order."""
        for earlier in [k for k in self._open if k < index]:
            self.scans[earlier] = self._open.pop(earlier).finish()
        if index in self._open:
            return self._open[index]
        entry = self._entries.get(index)
        if entry is None or index in self.scans:
            return None
        try:
            opened = _ClipDecode(self._out_dir / entry["file"], self._samples, int(entry["frames"]))
        except (av.FFmpegError, IndexError, OSError) as exc:
            self.scans[index] = _ClipScan(error=str(exc))
            return None
        self._open[index] = opened
        return opened

    def close(self) -> None:
        """Close every clip still open (the comparison stopped on an error)."""
        for opened in self._open.values():
            opened.close()
        self._open.clear()

    def finish(self) -> None:
        """Decode every clip the source did not reach, or not to its end."""
        for index in self._entries:
            if index not in self.scans:
                opened = self.decode(index)
                if opened is not None:
                    self.scans[index] = self._open.pop(index).finish()


def check_clips(
    out_dir: Path, source: Path, options: TranscodeOptions, post: QualityPost
) -> list[CheckOutcome]:
    """Every post-gate check of the clips in ``out_dir`` made from ``source``; never raises for bad clips."""
    try:
        manifest = read_manifest(out_dir)
    except (OSError, ValueError) as exc:
        return [failed_check("decode", ReasonCode.TRANSCODE_FAILED, f"no readable clips manifest: {exc}")]
    clips = options.clips or ClipOptions()
    settings = EncoderSettings.from_options(options)
    fps = float(Fraction(manifest["fps"]))
    problems: dict[str, tuple[ReasonCode, str]] = {}
    observed: dict[str, dict[str, Any]] = {
        k: {} for k in ("decode", "gop", "duration", "psnr", "colour", "sha256")
    }
    decoded = _Clips(out_dir, manifest["clips"], post.psnr_sample_frames)
    try:
        values, colours = _compare(source, manifest, options, decoded)
        decoded.finish()
    finally:
        decoded.close()
    for entry in manifest["clips"]:
        path = out_dir / entry["file"]
        name = entry["file"]
        scan = decoded.scans.get(int(entry["index"]))
        if scan is None or scan.error is not None:
            why = scan.error if scan is not None else "not decoded"
            problems.setdefault("decode", (ReasonCode.DECODE_ERROR, f"{name}: {why}"))
            continue
        n = len(scan.letters)
        observed["decode"][name] = {"frames": n, "expected": entry["frames"]}
        if n != entry["frames"]:
            problems.setdefault(
                "decode",
                (ReasonCode.FRAME_COUNT_MISMATCH, f"{name}: {n} frames, manifest says {entry['frames']}"),
            )
        letters = "".join(scan.letters)
        expected = expected_letters(n, settings).upper()
        if settings.codec == "h265":
            coders = {"cabac"} if hvcc_has_parameter_sets(scan.extradata) else set()
        else:
            try:
                coders = avcc_entropy_coders(scan.extradata)
            except ValueError:
                coders = set()
        observed["gop"][name] = {
            "keyframes": letters.count("I"),
            "gop_frames": settings.gop_frames,
            "entropy_coder": sorted(coders),
        }
        wrong_coder = coder_mismatch(coders, settings.entropy_coder)
        if wrong_coder:
            problems.setdefault("gop", (ReasonCode.GOP_MISMATCH, f"{name}: {wrong_coder}"))
        elif letters != expected:
            k = (
                next(i for i, (a, b) in enumerate(zip(letters, expected, strict=False)) if a != b)
                if len(letters) == len(expected)
                else 0
            )
            problems.setdefault(
                "gop",
                (
                    ReasonCode.GOP_MISMATCH,
                    f"{name}: frame {k} is {letters[k : k + 1]!r}, expected {expected[k : k + 1]!r}",
                ),
            )
        steps = {round((b - a) * fps, 3) for a, b in pairwise(scan.times_s)}
        duration_s = n / fps
        observed["duration"][name] = {"duration_s": duration_s, "frame_steps": sorted(steps)}
        if steps - {1.0} or not (
            clips.min_clip_duration_s - 1 / fps <= duration_s <= clips.max_clip_duration_s + 1 / fps
        ):
            problems.setdefault(
                "duration",
                (
                    ReasonCode.DURATION_MISMATCH,
                    f"{name}: {duration_s:.3f} s, frame steps {sorted(steps)} (in frames)",
                ),
            )
        digest, _ = sha256_file(path)
        observed["sha256"][name] = digest
        if digest != entry["sha256"]:
            problems.setdefault(
                "sha256",
                (ReasonCode.TRANSCODE_FAILED, f"{name}: sha256 {digest}, manifest {entry['sha256']}"),
            )
    luma_db = min((v.luma_db for v in values), default=None)
    chroma_db = min((v.chroma_db for v in values), default=None)
    observed["psnr"] = {"frames": len(values), "min_db": luma_db, "chroma_min_db": chroma_db}
    low = (
        below_threshold(luma_db, chroma_db, post.min_psnr_db)
        if luma_db is not None and chroma_db is not None
        else None
    )
    if not values or low:
        problems.setdefault(
            "psnr", (ReasonCode.PSNR_BELOW_THRESHOLD, f"lowest sampled PSNR: {low or 'no frame compared'}")
        )
    observed["colour"] = colours.observed()
    wrong = colours.problem(post.max_chroma_shift_levels)
    if wrong:
        problems.setdefault("colour", (ReasonCode.COLOUR_MISMATCH, f"clips {wrong}"))
    out = []
    for name in ("decode", "gop", "duration", "psnr", "colour", "sha256"):
        if name in problems:
            reason, detail = problems[name]
            out.append(CheckOutcome(name, False, reason, detail, observed[name]))
        else:
            out.append(CheckOutcome(name, True, observed=observed[name]))
    return out


def _compare(
    source: Path, manifest: dict[str, Any], options: TranscodeOptions, clips: _Clips
) -> tuple[list[Comparison], ColourFindings]:
    """The sampled clip frames against the normalised source frames they were encoded from, and their
    colours against the source's, as its first picture names them, read without the filter graph the
    clips were made through (the transform refuses a source whose matrix changes later).

    The source is decoded once, and each clip in step with it: a source frame the transform gave to a clip
    is paired with that clip's next decoded frame, so no picture is held beyond the pair compared."""
    with av.open(str(source)) as container:
        source_reading = colour_reading(next(container.decode(video=0)))
    raw = dict(manifest["analysis"])
    raw["scene_cuts_s"] = tuple(raw["scene_cuts_s"])
    raw["crop"] = tuple(raw["crop"]) if raw["crop"] else None
    analysis = Analysis(**raw)
    # The transform's own rule (clip_of) over the clips it wrote: a frame a hair before a cut goes to the
    # same clip in both, so positions within a clip line up with the frames encoded there.
    plans = [ClipPlan(c["index"], c["start_s"], c["end_s"]) for c in manifest["clips"]]
    values = []
    colours = ColourFindings()
    for frame in normalised_frames(source, analysis, options):
        index = clip_of(plans, float(frame.time or 0.0))
        clip = clips.decode(index) if index is not None else None
        pulled = clip.next() if clip is not None else None
        if clip is None or pulled is None or pulled[0] not in clip.wanted:
            continue
        picture = Sample.of(pulled[1])
        if picture.planes[0].shape == (frame.height, frame.width):
            # the frame as the writer gave it to the encoder: limited range (a full-range source's
            # normalised frames are full range, and compared as they are gave 30 dB for a clean clip)
            comparison = picture.compare(Sample.of(encoder_picture(frame, frame.width, frame.height)))
            values.append(comparison)
            colours.add(source_reading, picture, comparison)
    return values, colours
