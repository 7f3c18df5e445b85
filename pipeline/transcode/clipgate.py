"""The post-gate's checks of a video vendor's clips (see :mod:`pipeline.transcode.clips`).

* ``decode`` – every clip decodes end to end, with the frame count its manifest entry says;
* ``gop`` – keyframes exactly every ``gop_frames`` frames, picture types the profile's;
* ``duration`` – constant frame rate, and each clip between the minimum and maximum clip length;
* ``psnr`` – sampled clip frames against the same normalised source frames, luma and chroma;
* ``colour`` – the sampled clip frames show the source's colours: read in the matrix the source names,
  mean chroma within ``max_chroma_shift_levels`` (see :mod:`pipeline.transcode.postgate`);
* ``sha256`` – each clip's digest equals the manifest's.

Clips are decoded frame by frame, keeping only picture types, frame times and the sampled frames.
"""

from __future__ import annotations

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
    """What one decode of a clip keeps for the checks."""

    letters: list[str] = field(default_factory=list)  # picture type per frame, "I" for keyframes
    times_s: list[float] = field(default_factory=list)
    sampled: dict[int, Sample] = field(default_factory=dict)  # frame position -> its picture
    extradata: bytes = b""


def _scan_clip(path: Path, samples: int, listed_frames: int) -> _ClipScan:
    """Decode ``path`` once, keeping ``samples`` frames spread evenly over the clip.

    The positions come from the container's frame count (its sample table), so frames need not be held
    until the end; for a clip that decodes to another count the decode check fails anyway.
    """
    scan = _ClipScan()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        n = stream.frames or listed_frames
        wanted = set(np.linspace(0, n - 1, min(samples, n)).round().astype(int).tolist()) if n > 0 else set()
        for k, frame in enumerate(container.decode(stream)):
            scan.letters.append(
                "I" if frame.key_frame else av.video.frame.PictureType(int(frame.pict_type)).name
            )
            scan.times_s.append(float(frame.time or 0.0))
            if k in wanted:
                scan.sampled[k] = Sample.of(frame)
        scan.extradata = bytes(stream.codec_context.extradata or b"")
    return scan


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
    sampled: dict[tuple[int, int], Sample] = {}
    for entry in manifest["clips"]:
        path = out_dir / entry["file"]
        name = entry["file"]
        try:
            scan = _scan_clip(path, post.psnr_sample_frames, int(entry["frames"]))
        except (av.FFmpegError, IndexError, OSError) as exc:
            problems.setdefault("decode", (ReasonCode.DECODE_ERROR, f"{name}: {exc}"))
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
        for k, picture in scan.sampled.items():
            sampled[(entry["index"], k)] = picture
        digest, _ = sha256_file(path)
        observed["sha256"][name] = digest
        if digest != entry["sha256"]:
            problems.setdefault(
                "sha256",
                (ReasonCode.TRANSCODE_FAILED, f"{name}: sha256 {digest}, manifest {entry['sha256']}"),
            )
    values, colours = _compare(source, manifest, options, sampled)
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
    source: Path,
    manifest: dict[str, Any],
    options: TranscodeOptions,
    sampled: dict[tuple[int, int], Sample],
) -> tuple[list[Comparison], ColourFindings]:
    """The sampled clip frames against the normalised source frames they were encoded from, and their
    colours against the source's, as its first picture names them, read without the filter graph the
    clips were made through (the transform refuses a source whose matrix changes later)."""
    with av.open(str(source)) as container:
        source_reading = colour_reading(next(container.decode(video=0)))
    raw = dict(manifest["analysis"])
    raw["scene_cuts_s"] = tuple(raw["scene_cuts_s"])
    raw["crop"] = tuple(raw["crop"]) if raw["crop"] else None
    analysis = Analysis(**raw)
    # The transform's own rule (clip_of) over the clips it wrote: a frame a hair before a cut goes to the
    # same clip in both, so positions within a clip line up with the frames encoded there.
    plans = [ClipPlan(c["index"], c["start_s"], c["end_s"]) for c in manifest["clips"]]
    position: dict[int, int] = {}
    values = []
    colours = ColourFindings()
    for frame in normalised_frames(source, analysis, options):
        t = float(frame.time or 0.0)
        index = clip_of(plans, t)
        if index is None:
            continue
        k = position.get(index, 0)
        position[index] = k + 1
        picture = sampled.get((index, k))
        if picture is not None and picture.planes[0].shape == (frame.height, frame.width):
            # the frame as the writer gave it to the encoder: limited range (a full-range source's
            # normalised frames are full range, and compared as they are gave 30 dB for a clean clip)
            comparison = picture.compare(Sample.of(encoder_picture(frame, frame.width, frame.height)))
            values.append(comparison)
            colours.add(source_reading, picture, comparison)
    return values, colours
