"""The post-gate's checks of a transcoded robot episode against its source.

Each check returns a :class:`CheckOutcome` (recorded by the ``quality_post`` step with
``record_checks(gate=quality_post)``); a failed one carries the reason the output is quarantined with:

* ``decode`` – every camera decodes end to end (``decode_error``);
* ``frame_count`` – per camera as many frames as the source (less at most the tolerance), each at a source
  frame's stamp (``frame_count_mismatch``);
* ``duration`` – first-to-last frame span equals the source's within the tolerance (``duration_mismatch``);
* ``gop`` – the bitstream's frame types, keyframe interval and reference flags are the profile's, and the
  frame table the sample reader trusts says the same (``gop_mismatch``);
* ``psnr`` – sampled frames against the source frames of the same stamp, luma and chroma
  (``psnr_below_threshold``);
* ``colour`` – the sampled frames show their source frames' colours (``colour_mismatch``): a reader takes
  each in the matrix its source picture names (as tagged, untagged as BT.601; an RGB or gray source's, the
  BT.601 it is converted with) and with its HDR transfer (PQ, HLG) if it names one, as limited range (what the encoder is given, whatever the source's), and
  its mean Cb and Cr are within ``max_chroma_shift_levels`` of the source's. PSNR compares samples: an output whose samples are right but whose tags name another matrix
  passes it, and a cast of a few levels over the whole picture costs little of it;
* ``resample`` – resampled streams on the fixed-rate grid and equal to the source interpolated there, the
  native streams complete (``resample_error``);
* ``sha256`` – the output's digest, and equal to the recorded one when given (``transcode_failed``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import av
import numpy as np
from av.video.reformatter import ColorRange
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.reader import make_reader

from pipeline.config import QualityPost
from pipeline.enums import CheckStatus, ReasonCode
from pipeline.transcode import layout
from pipeline.transcode.bitstream import unit_info
from pipeline.transcode.cameras import colour_reading, decode_units, encoder_picture, timestamp
from pipeline.transcode.errors import TranscodeInputError
from pipeline.transcode.h264 import coder_mismatch, frame_letter
from pipeline.transcode.profiles import EncoderSettings, expected_letters
from pipeline.transcode.publish import sha256_file
from pipeline.transcode.resample import NS_PER_S, Series, grid_instant, resample_rmse
from pipeline.transcode.robot import RobotTranscodeConfig
from pipeline.transcode.source import SourceEpisode, read_source

#: PSNR of identical pictures, reported instead of infinity (JSON has no infinity).
PSNR_IDENTICAL_DB = 99.0


@dataclass(frozen=True)
class CheckOutcome:
    """One post-gate check: passed or failed with a reason, and what was measured."""

    name: str
    passed: bool
    reason: ReasonCode | None = None
    detail: str | None = None
    observed: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> CheckStatus:
        return CheckStatus.PASSED if self.passed else CheckStatus.FAILED


def _ok(name: str, **observed: Any) -> CheckOutcome:
    return CheckOutcome(name, True, observed=observed)


def failed_check(name: str, reason: ReasonCode, detail: str, **observed: Any) -> CheckOutcome:
    """A failed check with its reason (the episode and clip post-gates both build them)."""
    return CheckOutcome(name, False, reason, detail, observed)


@dataclass
class _OutCamera:
    name: str
    topic: str
    units: list[bytes]
    pts_ns: list[int]  # decode order
    table: dict[str, Any]


@dataclass
class _Output:
    cameras: dict[str, _OutCamera]
    series: dict[str, tuple[list[int], list[dict[str, Any]]]]  # topic -> (log times, records)
    methods: dict[str, dict[str, str]]
    rates: dict[str, float]
    counts: dict[str, int]


def _picture_type(frame: av.VideoFrame) -> str:
    """The decoder's picture type letter (I, P, B...)."""
    return av.video.frame.PictureType(int(frame.pict_type)).name


def psnr_db(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR of two uint8 pictures of the same shape (8-bit peak)."""
    if a.dtype != np.uint8 or b.dtype != np.uint8 or a.shape != b.shape or a.size == 0:
        raise ValueError(
            f"psnr_db takes two uint8 pictures of one shape, not {a.dtype}{a.shape} and {b.dtype}{b.shape}"
        )
    diff = np.subtract(a, b, dtype=np.int16).ravel()
    mse = int(np.einsum("i,i->", diff, diff, dtype=np.int64)) / diff.size
    return PSNR_IDENTICAL_DB if mse == 0 else min(PSNR_IDENTICAL_DB, 10 * math.log10(255.0**2 / mse))


def _plane(frame: av.VideoFrame, k: int) -> np.ndarray:
    plane = frame.planes[k]
    return (
        np.frombuffer(memoryview(plane), np.uint8)
        .reshape(plane.height, plane.line_size)[:, : plane.width]
        .copy()
    )


def luma(frame: av.VideoFrame) -> np.ndarray:
    """The Y plane of a yuv420p frame, without the line padding."""
    return _plane(frame, 0)


def below_threshold(luma_db: float, chroma_db: float, threshold_db: float) -> str | None:
    """What of a picture's lowest luma and chroma PSNR is below ``threshold_db``, said for a reason's
    detail, or ``None``."""
    low = [
        f"{what} {db:.2f} dB" for what, db in (("luma", luma_db), ("chroma", chroma_db)) if db < threshold_db
    ]
    return f"{' and '.join(low)}, threshold {threshold_db} dB" if low else None


@dataclass(frozen=True)
class Sample:
    """What the post-gates keep of a sampled yuv420p picture: its planes (no line padding), the matrix a
    reader takes them in, with an HDR transfer (:func:`~pipeline.transcode.cameras.colour_reading`), and
    whether it takes them as full range (untagged: limited)."""

    planes: tuple[np.ndarray, np.ndarray, np.ndarray]
    reading: str
    full_range: bool

    @classmethod
    def of(cls, frame: av.VideoFrame) -> Sample:
        planes = (_plane(frame, 0), _plane(frame, 1), _plane(frame, 2))
        return cls(planes, colour_reading(frame), frame.color_range == ColorRange.JPEG)

    def compare(self, reference: Sample) -> Comparison:
        """This picture against ``reference``, one of the same size."""
        y, cb, cr = (psnr_db(a, b) for a, b in zip(self.planes, reference.planes, strict=True))
        shift = max(
            abs(float(a.mean(dtype=np.float64)) - float(b.mean(dtype=np.float64)))
            for a, b in zip(self.planes[1:], reference.planes[1:], strict=True)
        )
        return Comparison(y, min(cb, cr), shift)


class Comparison(NamedTuple):
    """An output picture against the source picture the encoder was given: luma PSNR, the lower chroma
    PSNR, and the larger shift of the mean Cb or Cr (8-bit levels; an encode's errors average out over a
    picture, a colour cast does not)."""

    luma_db: float
    chroma_db: float
    chroma_shift: float


@dataclass
class ColourFindings:
    """What the ``colour`` check finds over one camera's (or one video's clips') sampled pictures: the
    matrix of each source picture and of its output picture, the output's ranges, and the largest chroma
    shift."""

    pairs: set[tuple[str, str]] = field(default_factory=set)
    ranges: set[str] = field(default_factory=set)
    chroma_shift: float = 0.0

    def add(self, source_reading: str, output: Sample, comparison: Comparison) -> None:
        self.pairs.add((source_reading, output.reading))
        self.ranges.add("full" if output.full_range else "limited")
        self.chroma_shift = max(self.chroma_shift, comparison.chroma_shift)

    def observed(self) -> dict[str, Any]:
        return {
            "source": sorted({s for s, _ in self.pairs}),
            "output": sorted({o for _, o in self.pairs}),
            "output_range": sorted(self.ranges),
            # none when no picture was compared: 0 would read as a perfect match in the quality figures
            "chroma_shift_max": round(self.chroma_shift, 3) if self.pairs else None,
        }

    def problem(self, max_shift: float) -> str | None:
        """Why the output shows other colours than its source, or ``None``."""
        wrong = sorted((s, o) for s, o in self.pairs if s != o)
        if wrong:
            return f"read as {wrong[0][1]}, its source as {wrong[0][0]}"
        if "full" in self.ranges:
            # the samples are limited range whatever the source's (encoder_picture): read as full range
            # they show washed out, black at 16 and white at 235
            return "read as full range, its samples limited range"
        if self.chroma_shift > max_shift:
            return f"mean chroma shifted by {self.chroma_shift:.2f} levels on a sampled frame, at most {max_shift}"
        return None


def _read_output(path: Path) -> _Output:
    cameras: dict[str, _OutCamera] = {}
    series: dict[str, tuple[list[int], list[dict[str, Any]]]] = {}
    counts: dict[str, int] = {}
    with open(path, "rb") as fh:
        reader = make_reader(fh, validate_crcs=True)
        metadata = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
        tables = {name: json.loads(text) for name, text in metadata.get(layout.FRAMES_METADATA, {}).items()}
        by_topic = {t["topic"]: name for name, t in tables.items()}
        for name, table in tables.items():
            cameras[name] = _OutCamera(name, table["topic"], [], [], table)
        methods: dict[str, dict[str, str]] = {}
        rates: dict[str, float] = {}
        for _, channel, message in reader.iter_messages(log_time_order=False):
            topic = channel.topic
            counts[topic] = counts.get(topic, 0) + 1
            if topic in by_topic:
                video = CompressedVideo.FromString(message.data)
                camera = cameras[by_topic[topic]]
                camera.units.append(video.data)
                camera.pts_ns.append(video.timestamp.ToNanoseconds())
            elif channel.metadata.get(layout.GROUP_KEY) == layout.GROUP_PROPRIO:
                stamps, records = series.setdefault(topic, ([], []))
                stamps.append(message.log_time)
                records.append(json.loads(message.data))
                methods[topic] = json.loads(channel.metadata.get(layout.INTERPOLATION_KEY, "{}"))
                rates[topic] = float(channel.metadata.get(layout.RESAMPLE_RATE_KEY, "nan"))
    return _Output(cameras, series, methods, rates, counts)


def check_episode(
    output: Path,
    source: Path,
    config: RobotTranscodeConfig,
    post: QualityPost,
    *,
    expected_sha256: str | None = None,
) -> list[CheckOutcome]:
    """Run every post-gate check of ``output`` against ``source``; never raises for a bad output."""
    try:
        out = _read_output(output)
    except Exception as exc:  # the stock reader raises bare errors on damaged bytes
        return [
            failed_check(
                "decode", ReasonCode.DECODE_ERROR, f"output does not read: {type(exc).__name__}: {exc}"
            )
        ]
    src = read_source(source, config.contract, config.truth)
    settings = EncoderSettings.from_options(config.options)
    results = _video_checks(out, src, settings, post)
    results.append(_resample_check(out, src, config, post))
    digest, size = sha256_file(output)
    if expected_sha256 is not None and digest != expected_sha256:
        results.append(
            failed_check(
                "sha256",
                ReasonCode.TRANSCODE_FAILED,
                f"sha256 {digest}, recorded {expected_sha256}",
                sha256=digest,
            )
        )
    else:
        results.append(_ok("sha256", sha256=digest, size_bytes=size))
    return results


def _video_checks(
    out: _Output, src: SourceEpisode, settings: EncoderSettings, post: QualityPost
) -> list[CheckOutcome]:
    decode_obs: dict[str, Any] = {}
    count_obs: dict[str, Any] = {}
    duration_obs: dict[str, Any] = {}
    gop_obs: dict[str, Any] = {}
    psnr_obs: dict[str, Any] = {}
    colour_obs: dict[str, Any] = {}
    failures: dict[str, tuple[ReasonCode, str]] = {}
    for camera in src.cameras:
        got = out.cameras.get(camera.name)
        if got is None or not got.units:
            failures.setdefault(
                "decode", (ReasonCode.DECODE_ERROR, f"camera {camera.name}: not in the output")
            )
            continue
        # decode end to end (sequentially, as a player would), keeping the sampled frames' luma
        n = len(got.units)
        display = sorted(range(n), key=lambda i: got.pts_ns[i])
        sampled = {display[round(k)] for k in np.linspace(0, n - 1, min(post.psnr_sample_frames, n))}
        out_samples: dict[int, Sample] = {}
        pict_types: dict[int, str] = {}
        size = None
        try:
            units = decode_units(
                got.units, what=f"output camera {camera.name}", decoder_name=settings.decoder_name
            )
            for frame in units:
                pict_types[timestamp(frame)] = _picture_type(frame)
                size = (frame.width, frame.height)
                if timestamp(frame) in sampled:
                    out_samples[timestamp(frame)] = Sample.of(frame)
        except TranscodeInputError as exc:
            failures.setdefault("decode", (ReasonCode.DECODE_ERROR, str(exc)))
            continue
        decode_obs[camera.name] = {"units": n, "decoded": len(pict_types)}
        if len(pict_types) != n:
            failures.setdefault(
                "decode",
                (ReasonCode.DECODE_ERROR, f"camera {camera.name}: {len(pict_types)} of {n} units decode"),
            )
        # frame count and stamps
        source_n = camera.frame_count
        stamps = set(camera.stamps_ns)
        foreign = [p for p in got.pts_ns if p not in stamps]
        count_obs[camera.name] = {"source": source_n, "output": n, "foreign_stamps": len(foreign)}
        if n > source_n or source_n - n > post.frame_count_tolerance_frames or foreign:
            failures.setdefault(
                "frame_count",
                (
                    ReasonCode.FRAME_COUNT_MISMATCH,
                    f"camera {camera.name}: {n} frames for {source_n} in the source "
                    f"(tolerance {post.frame_count_tolerance_frames}), {len(foreign)} at stamps the source lacks",
                ),
            )
        span_out = (max(got.pts_ns) - min(got.pts_ns)) / NS_PER_S
        span_src = (max(camera.stamps_ns) - min(camera.stamps_ns)) / NS_PER_S
        duration_obs[camera.name] = {"source_s": span_src, "output_s": span_out}
        if abs(span_out - span_src) > post.duration_tolerance_s:
            failures.setdefault(
                "duration",
                (
                    ReasonCode.DURATION_MISMATCH,
                    f"camera {camera.name}: {span_out:.3f} s against {span_src:.3f} s "
                    f"(tolerance {post.duration_tolerance_s} s)",
                ),
            )
        # GOP audit: bitstream letters in display order against the profile's pattern
        try:
            infos = [unit_info(settings.codec, u) for u in got.units]
        except ValueError as exc:  # a unit without a (whole) slice: judged, not raised
            failures.setdefault(
                "gop", (ReasonCode.GOP_MISMATCH, f"camera {camera.name}: unreadable access unit: {exc}")
            )
            continue
        letters = [frame_letter(i) for i in infos]
        shown = "".join(letters[i] for i in display)
        expected = expected_letters(n, settings)
        decoder_says = "".join(pict_types.get(i, "?")[:1] for i in display)
        table_ok = (
            got.table.get("types") == "".join(letters)
            and got.table.get("pts_ns") == got.pts_ns
            and got.table.get("codec", "h264") == settings.codec
        )
        mismatch = next((k for k, (a, b) in enumerate(zip(shown, expected, strict=True)) if a != b), None)
        decoder_mismatch = next(
            (k for k, (a, b) in enumerate(zip(shown, decoder_says, strict=True)) if a.upper() != b), None
        )
        coders = set().union(*(i.coders for i in infos))
        gop_obs[camera.name] = {
            "codec": settings.codec,
            "keyframes": shown.count("I") + shown.count("i"),
            "gop_frames": settings.gop_frames,
            "b_frames": sum(1 for c in shown if c in "Bb"),
            "reference_b_frames": shown.count("B"),
            "entropy_coder": sorted(coders),
        }
        wrong_coder = coder_mismatch(coders, settings.entropy_coder)
        if mismatch is not None or decoder_mismatch is not None or not table_ok or wrong_coder:
            if wrong_coder:
                why = wrong_coder
            elif mismatch is not None:
                why = (
                    f"display frame {mismatch} is {shown[mismatch]!r}, profile {settings.profile.value} "
                    f"(gop {settings.gop_frames}) expects {expected[mismatch]!r}"
                )
            elif decoder_mismatch is not None:
                why = f"display frame {decoder_mismatch}: bitstream says {shown[decoder_mismatch]!r}, decoder {decoder_says[decoder_mismatch]!r}"
            else:
                why = "the sluice.frames table does not match the bitstream"
            failures.setdefault("gop", (ReasonCode.GOP_MISMATCH, f"camera {camera.name}: {why}"))
        # PSNR of the sampled frames against the source frames with the same stamp, and the colours both
        # are read as
        index_of = {stamp: i for i, stamp in enumerate(camera.stamps_ns)}
        wanted = {index_of[got.pts_ns[p]]: p for p in out_samples if got.pts_ns[p] in index_of}
        values: list[Comparison] = []
        colours = ColourFindings()
        if size is not None and wanted:
            for frame in camera.frames.decode(what=f"source camera {camera.name}"):
                p = wanted.get(timestamp(frame))
                if p is None:
                    continue
                # the source as the encoder was given it: scaled, limited-range yuv420p; its colours as
                # the source picture itself says them
                comparison = out_samples[p].compare(Sample.of(encoder_picture(frame, *size)))
                values.append(comparison)
                colours.add(colour_reading(frame), out_samples[p], comparison)
        if values:
            luma_db = min(v.luma_db for v in values)
            chroma_db = min(v.chroma_db for v in values)
            psnr_obs[camera.name] = {
                "min_db": round(luma_db, 3),
                "mean_db": round(float(np.mean([v.luma_db for v in values])), 3),
                "chroma_min_db": round(chroma_db, 3),
                "frames": len(values),
            }
            low = below_threshold(luma_db, chroma_db, post.min_psnr_db)
            if low:
                failures.setdefault(
                    "psnr",
                    (ReasonCode.PSNR_BELOW_THRESHOLD, f"camera {camera.name}: {low} on a sampled frame"),
                )
            colour_obs[camera.name] = colours.observed()
            wrong = colours.problem(post.max_chroma_shift_levels)
            if wrong:
                failures.setdefault("colour", (ReasonCode.COLOUR_MISMATCH, f"camera {camera.name}: {wrong}"))
        else:
            failures.setdefault(
                "psnr", (ReasonCode.PSNR_BELOW_THRESHOLD, f"camera {camera.name}: no frame to compare")
            )
    observed = {
        "decode": decode_obs,
        "frame_count": count_obs,
        "duration": duration_obs,
        "gop": gop_obs,
        "psnr": psnr_obs,
        "colour": colour_obs,
    }
    results = []
    for name in ("decode", "frame_count", "duration", "gop", "psnr", "colour"):
        if name in failures:
            reason, detail = failures[name]
            results.append(failed_check(name, reason, detail, cameras=observed[name]))
        else:
            results.append(_ok(name, cameras=observed[name]))
    return results


def _resample_check(
    out: _Output, src: SourceEpisode, config: RobotTranscodeConfig, post: QualityPost
) -> CheckOutcome:
    rate_hz = config.options.resample_rate_hz
    native = {s.topic: s for s in (*src.state, *src.actions)}
    observed: dict[str, Any] = {}
    problems: list[str] = []
    missing_native = {
        t: (len(s.stamps_ns), out.counts.get(t, 0))
        for t, s in native.items()
        if out.counts.get(t, 0) != len(s.stamps_ns)
    }
    if missing_native:
        problems.append(f"native streams not kept whole (source, output): {missing_native}")
    if rate_hz is None:
        if out.series:
            problems.append("resampled streams written though resample_rate_hz is none")
        return _summarise_resample(problems, observed)
    rate = Fraction(rate_hz).limit_denominator(1_000_000)
    for topic, series in native.items():
        name = layout.resampled_topic(topic)
        if name not in out.series:
            problems.append(f"{name}: missing")
            continue
        stamps, records = out.series[name]
        at = np.asarray(stamps, dtype=np.int64)
        ks = [Fraction(int(s)) * rate / NS_PER_S for s in stamps]
        off_grid = sum(1 for k, s in zip(ks, stamps, strict=True) if grid_instant(round(k), rate) != s)
        steps = {round(k) for k in ks}
        gaps = len(stamps) - len(steps) + (max(steps) - min(steps) + 1 - len(steps) if steps else 0)
        methods = out.methods.get(name, {})
        errors = resample_rmse(series, at, records, methods)  # type: ignore[arg-type]
        worst = max(errors.values(), default=0.0)
        observed[name] = {
            "messages": len(stamps),
            "rate_hz": out.rates.get(name),
            "off_grid": off_grid,
            "gaps": gaps,
            "rmse": {k: (v if math.isfinite(v) else None) for k, v in errors.items()},
            "methods": methods,
        }
        if out.rates.get(name) != rate_hz:
            problems.append(f"{name}: rate {out.rates.get(name)} Hz, config {rate_hz:g} Hz")
        if off_grid or gaps:
            problems.append(
                f"{name}: {off_grid} stamps off the {rate_hz:g} Hz grid, {gaps} missing or repeated"
            )
        if not methods or set(methods) != set(errors):
            problems.append(f"{name}: interpolation per field not recorded")
        if worst > post.max_resample_rmse:
            field_name = max(errors, key=lambda k: errors[k])
            problems.append(f"{name}.{field_name}: RMS error {worst:.4g}, bound {post.max_resample_rmse}")
    return _summarise_resample(problems, observed)


def _summarise_resample(problems: list[str], observed: Mapping[str, Any]) -> CheckOutcome:
    if problems:
        return failed_check("resample", ReasonCode.RESAMPLE_ERROR, "; ".join(problems), topics=dict(observed))
    return _ok("resample", topics=dict(observed))


__all__ = ["CheckOutcome", "Series", "check_episode", "psnr_db"]
