"""The ``controls`` declared on config fields are true: moving a setting across the measured figure makes
its reason appear and disappear, through the real gate functions on small synthetic inputs.

Every declared ``(key, reason)`` pair needs a crossing below, and every crossing a declaration. A crossing
gives the input, the vendor it starts from, and a *strict* and a *lenient* value of the key, computed from
what the lenient run measured (the observed figure); the test sets only that key. Under the strict value one
of the key's declared checks must fail with the reason; under the lenient value none may.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcap.reader import make_reader
from quality_inputs import Inputs

from pipeline.config import VendorConfig, generic_vendor, load_vendor
from pipeline.docsgen import config_controls
from pipeline.enums import CheckStatus, ReasonCode
from pipeline.mcaplog import LogReport, read_log
from pipeline.quality.pregate import check_mcap, check_video, probe_limits, topic_gap_rates
from pipeline.steps.quality_pre import read_log_options

R = ReasonCode
REPO = Path(__file__).resolve().parents[2]
ACME = REPO / "dags" / "vendors" / "acme_robotics.yaml"
NORTHWIND = REPO / "dags" / "vendors" / "northwind_video.yaml"
KESTREL = REPO / "dags" / "vendors" / "kestrel_ros2.yaml"
ROLES = ("cameras", "state", "actions")

Outcomes = list[Any]  # pre-gate or post-gate CheckOutcome: both have name, status, reason


@dataclass(frozen=True)
class Crossing:
    run: Callable[[VendorConfig], Outcomes]
    base: VendorConfig
    strict: Any
    lenient: Any


# -- setting one key -----------------------------------------------------------------------------------------


def with_value(vendor: VendorConfig, key: str, value: Any) -> VendorConfig:
    """``vendor`` with the dotted ``key`` set (a key inside a list of topics sets its first item)."""
    data = copy.deepcopy(vendor.model_dump(mode="json"))
    node: Any = data
    parts = key.split(".")
    for part in parts[:-1]:
        node = node[part]
        if isinstance(node, list):
            node = node[0]
    node[parts[-1]] = value
    return VendorConfig.model_validate(data)


def _edit(vendor: VendorConfig, fn: Callable[[dict[str, Any]], None]) -> VendorConfig:
    data = copy.deepcopy(vendor.model_dump(mode="json"))
    fn(data)
    return VendorConfig.model_validate(data)


# -- running the real gates ----------------------------------------------------------------------------------


def read_like_the_step(path: Path, vendor: VendorConfig) -> LogReport:
    """``read_log`` as the quality_pre step calls it for this vendor."""
    return read_log(path, **read_log_options(vendor))


def mcap_gate(path: Path, calibration_id: int | None = 1) -> Callable[[VendorConfig], Outcomes]:
    def run(vendor: VendorConfig) -> Outcomes:
        return check_mcap(read_like_the_step(path, vendor), vendor, calibration_id=calibration_id)

    return run


_PROBES: dict[tuple[Path, Any], Any] = {}


def probe(path: Path, vendor: VendorConfig) -> Any:
    """The sandboxed probe of ``path`` under ``vendor``'s limits (cached: most crossings reuse one probe)."""
    from pipeline.videoprobe import VideoProber

    limits = probe_limits(vendor)
    if (path, limits) not in _PROBES:
        with VideoProber(limits) as prober:
            _PROBES[(path, limits)] = prober.probe(path)
    return _PROBES[(path, limits)]


def video_gate(path: Path) -> Callable[[VendorConfig], Outcomes]:
    return lambda vendor: check_video(probe(path, vendor), vendor)


def post_gate(output: Callable[[VendorConfig], Path], source: Path) -> Callable[[VendorConfig], Outcomes]:
    from pipeline.transcode import RobotTranscodeConfig
    from pipeline.transcode.postgate import check_episode

    def run(vendor: VendorConfig) -> Outcomes:
        config = RobotTranscodeConfig.from_vendor(vendor)
        return check_episode(output(vendor), source, config, vendor.quality.post)

    return run


def raised(outcomes: Outcomes) -> set[tuple[str, ReasonCode]]:
    return {
        (o.name, o.reason) for o in outcomes if o.status is not CheckStatus.PASSED and o.reason is not None
    }


# -- the crossings -------------------------------------------------------------------------------------------


def acme() -> VendorConfig:
    return load_vendor(ACME)


def video_vendor() -> VendorConfig:
    """A video vendor whose contract lets every readable clip through: each crossing tightens one key."""
    return generic_vendor("video", str(REPO))


def _first(vendor: VendorConfig, role: str) -> Any:
    assert vendor.topics is not None
    return getattr(vendor.topics, role)[0]


def _stats(path: Path, vendor: VendorConfig, topic: str) -> Any:
    return next(t for t in read_like_the_step(path, vendor).topics if t.topic == topic)


def gap_rate(i: Inputs) -> Crossing:
    vendor = acme()
    rates = topic_gap_rates(read_like_the_step(i.dropped_frames, vendor), vendor)
    worst = max(r for r in rates.values() if r is not None)
    return Crossing(mcap_gate(i.dropped_frames), vendor, worst / 2, min(1.0, worst * 1.5))


def rate_hz(role: str) -> Callable[[Inputs], Crossing]:
    def crossing(i: Inputs) -> Crossing:
        vendor = acme()
        measured = _stats(i.clean, vendor, _first(vendor, role).topic).rate_hz
        return Crossing(mcap_gate(i.clean), vendor, measured * 2, measured * 0.9)

    return crossing


def clock_jump(i: Inputs) -> Crossing:
    vendor = acme()
    jump_s = max(t.largest_jump_ns for t in read_like_the_step(i.clock_jump, vendor).topics) / 1e9
    return Crossing(mcap_gate(i.clock_jump), vendor, jump_s / 2, jump_s * 2)


def clock_skew(i: Inputs) -> Crossing:
    vendor = acme()
    skews = [
        abs(x)
        for t in read_like_the_step(i.clean, vendor).topics
        for x in (t.skew_min_ns, t.skew_max_ns)
        if x
    ]
    worst_s = max(skews) / 1e9
    return Crossing(mcap_gate(i.clean), vendor, worst_s / 2, worst_s * 2)


def backward_steps(i: Inputs) -> Crossing:
    vendor = acme()
    steps = max(t.backward_steps for t in read_like_the_step(i.backward, vendor).topics)
    return Crossing(mcap_gate(i.backward), vendor, steps - 1, steps)


def duplicate_timestamps(i: Inputs) -> Crossing:
    vendor = acme()
    repeats = max(t.duplicate_log_times for t in read_like_the_step(i.duplicate_times, vendor).topics)
    return Crossing(mcap_gate(i.duplicate_times), vendor, repeats - 1, repeats)


def min_frames(i: Inputs) -> Crossing:
    vendor = acme()
    assert vendor.topics is not None
    frames = min(_stats(i.clean, vendor, c.topic).message_count for c in vendor.topics.cameras)
    return Crossing(mcap_gate(i.clean), vendor, frames + 1, frames)


def _duration_s(path: Path, vendor: VendorConfig) -> float:
    report = read_like_the_step(path, vendor)
    assert report.start_ns is not None and report.end_ns is not None
    return (report.end_ns - report.start_ns) / 1e9


def min_duration(i: Inputs) -> Crossing:
    vendor = acme()
    duration_s = _duration_s(i.clean, vendor)
    return Crossing(mcap_gate(i.clean), vendor, duration_s + 0.1, duration_s - 0.1)


def max_duration(i: Inputs) -> Crossing:
    vendor = acme()
    duration_s = _duration_s(i.clean, vendor)
    # still above quality.pre.min_duration_s: a bound below the minimum passes everything (see the report)
    return Crossing(mcap_gate(i.clean), vendor, duration_s - 0.1, duration_s + 0.1)


def message_encodings(i: Inputs) -> Crossing:
    vendor = acme()
    assert vendor.topics is not None and vendor.topics.message_encodings is not None
    used = sorted({t.message_encoding for t in read_like_the_step(i.extra_cbor_channel, vendor).topics})
    assert "cbor" in used and "cbor" not in vendor.topics.message_encodings
    return Crossing(mcap_gate(i.extra_cbor_channel), vendor, list(vendor.topics.message_encodings), used)


def schema_encodings(i: Inputs) -> Crossing:
    vendor = acme()
    used = sorted({t.schema_encoding or "none" for t in read_like_the_step(i.clean, vendor).topics})
    return Crossing(mcap_gate(i.clean), vendor, used[1:], used)


def topic_message_encodings(role: str) -> Callable[[Inputs], Crossing]:
    def crossing(i: Inputs) -> Crossing:
        vendor = acme()
        actual = _stats(i.clean, vendor, _first(vendor, role).topic).message_encoding
        other = next(e for e in ("json", "protobuf") if e != actual)  # both in the example's allow-list
        return Crossing(mcap_gate(i.clean), vendor, [other], [actual])

    return crossing


def topic_schema_names(role: str) -> Callable[[Inputs], Crossing]:
    def crossing(i: Inputs) -> Crossing:
        vendor = acme()
        actual = _stats(i.clean, vendor, _first(vendor, role).topic).schema_name
        return Crossing(mcap_gate(i.clean), vendor, [f"{actual}.Other"], [actual])

    return crossing


def topic_required(role: str) -> Callable[[Inputs], Crossing]:
    """A contract topic the log lacks, listed first in ``role``: required or not."""

    def crossing(i: Inputs) -> Crossing:
        def add_absent(data: dict[str, Any]) -> None:
            spec = dict(data["topics"][role][0], topic="/absent/topic")
            if role == "cameras":
                spec["name"] = "absent"
            data["topics"][role].insert(0, spec)

        vendor = _edit(acme(), add_absent)
        assert all(t.topic != "/absent/topic" for t in read_like_the_step(i.clean, vendor).topics)
        return Crossing(mcap_gate(i.clean), vendor, True, False)

    return crossing


def compressions(i: Inputs) -> Crossing:
    with open(i.clean, "rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None
    used = sorted({ci.compression or "none" for ci in summary.chunk_indexes})
    unused = sorted({"lz4", "none", "zstd"} - set(used))
    return Crossing(mcap_gate(i.clean), acme(), unused, used)


def max_record_bytes(i: Inputs) -> Crossing:
    with open(i.clean, "rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None
    # a chunk index's length counts the record's opcode (1 byte) and length field (8 bytes)
    largest = max(ci.chunk_length for ci in summary.chunk_indexes) - 9
    return Crossing(mcap_gate(i.clean), acme(), largest // 2, largest)


def _uncalibrated() -> VendorConfig:
    def off(data: dict[str, Any]) -> None:
        data["calibration"] = {"topics": [], "sidecar_path": None}

    return _edit(acme(), off)


def calibration_topics(i: Inputs) -> Crossing:
    """No calibration covers the episode (``calibration_id`` None): the check exists only when enabled."""
    return Crossing(mcap_gate(i.clean, calibration_id=None), _uncalibrated(), ["/cam/front/calibration"], [])


def calibration_sidecar(i: Inputs) -> Crossing:
    return Crossing(mcap_gate(i.clean, calibration_id=None), _uncalibrated(), "calibrations.json", None)


def containers(i: Inputs) -> Crossing:
    return Crossing(video_gate(i.clip), video_vendor(), ["mkv"], ["mp4"])


def codecs(i: Inputs) -> Crossing:
    codec = probe(i.clip, video_vendor()).codec
    other = "hevc" if codec != "hevc" else "h264"
    return Crossing(video_gate(i.clip), video_vendor(), [other], [codec])


def size_bound(axis: str, bound: str) -> Callable[[Inputs], Crossing]:
    def crossing(i: Inputs) -> Crossing:
        measured = getattr(probe(i.clip, video_vendor()), axis)
        strict = measured + 1 if bound == "min" else measured - 1
        return Crossing(video_gate(i.clip), video_vendor(), strict, measured)

    return crossing


def fps_bound(bound: str) -> Callable[[Inputs], Crossing]:
    def crossing(i: Inputs) -> Crossing:
        found = probe(i.clip, video_vendor())
        fps = float(found.fps_measured or found.fps_avg)
        strict, lenient = (fps + 1, fps - 1) if bound == "min" else (fps - 1, fps + 1)
        return Crossing(video_gate(i.clip), video_vendor(), strict, lenient)

    return crossing


def blank_stddev(i: Inputs) -> Crossing:
    """Half black, half noise: with a flatness bound above the noise's spread every frame counts as blank."""
    ratio = probe(i.half_black, video_vendor()).blank_ratio
    assert ratio is not None and 0.3 < ratio < 0.7
    return Crossing(video_gate(i.half_black), video_vendor(), 200.0, 1.0)


def blank_fraction(i: Inputs) -> Crossing:
    ratio = probe(i.half_black, video_vendor()).blank_ratio
    assert ratio is not None and 0 < ratio < 1
    return Crossing(video_gate(i.half_black), video_vendor(), ratio / 2, (ratio + 1) / 2)


def letterbox(i: Inputs) -> Crossing:
    box = probe(i.letterboxed, video_vendor()).letterbox
    assert box is not None
    bars = max(box.vertical, box.horizontal)
    return Crossing(video_gate(i.letterboxed), video_vendor(), bars / 2, (bars + 1) / 2)


def vfr_tolerance(i: Inputs) -> Crossing:
    """Every fifth interval is 1.5 periods, half a period off: counted under a tolerance below 0.5 only."""
    return Crossing(video_gate(i.variable_rate), video_vendor(), 0.2, 0.6)


def probe_timeout(i: Inputs) -> Crossing:
    return Crossing(video_gate(i.clip), video_vendor(), 0.001, 120.0)


def probe_memory(i: Inputs) -> Crossing:
    """32 MiB of headroom decodes small clips but not 1080p HEVC's reference pictures (tests/videoprobe)."""
    return Crossing(video_gate(i.heavy_hevc), video_vendor(), 32 * 2**20, 2 * 2**30)


def min_psnr(i: Inputs) -> Crossing:
    vendor = acme()
    run = post_gate(i.transcoded, i.post_source)
    psnr = next(o for o in run(vendor) if o.name == "psnr")
    lowest = min(camera["min_db"] for camera in psnr.observed["cameras"].values())
    return Crossing(run, vendor, lowest + 1, lowest - 1)


def max_chroma_shift(i: Inputs) -> Crossing:
    """A clean transcode moves the mean chroma a little (an encode's rounding): below that, it fails."""
    vendor = acme()
    run = post_gate(i.transcoded, i.post_source)
    colour = next(o for o in run(vendor) if o.name == "colour")
    largest = max(camera["chroma_shift_max"] for camera in colour.observed["cameras"].values())
    assert largest > 0
    return Crossing(run, vendor, largest / 2, largest + 1)


def frame_count_tolerance(i: Inputs) -> Crossing:
    vendor = acme()
    run = post_gate(i.transcoded_short, i.post_source)
    counts = next(o for o in run(vendor) if o.name == "frame_count").observed["cameras"]
    short = max(c["source"] - c["output"] for c in counts.values())
    return Crossing(run, vendor, short - 1, short)


def duration_tolerance(i: Inputs) -> Crossing:
    vendor = acme()
    run = post_gate(i.transcoded_short, i.post_source)
    spans = next(o for o in run(vendor) if o.name == "duration").observed["cameras"]
    gap_s = max(abs(c["source_s"] - c["output_s"]) for c in spans.values())
    return Crossing(run, vendor, gap_s / 2, gap_s * 2)


def resample_rmse(i: Inputs) -> Crossing:
    vendor = acme()
    run = post_gate(i.transcoded, i.post_source)
    topics = next(o for o in run(vendor) if o.name == "resample").observed["topics"]
    worst = max(v for t in topics.values() for v in t["rmse"].values() if v is not None)
    assert worst > 0, "an exact resample leaves nothing to cross"
    return Crossing(run, vendor, worst / 2, worst * 2)


def northwind() -> VendorConfig:
    return load_vendor(NORTHWIND)


def clip_gate(i: Inputs) -> Callable[[VendorConfig], Outcomes]:
    from pipeline.transcode.clipgate import check_clips

    return lambda vendor: check_clips(i.clips(northwind()), i.clip, vendor.transcode, vendor.quality.post)


def _clip_duration_s(i: Inputs) -> float:
    durations = next(o for o in clip_gate(i)(northwind()) if o.name == "duration").observed
    assert len(durations) == 1, durations  # one scene, one clip
    return float(next(iter(durations.values()))["duration_s"])


def max_clip_duration(i: Inputs) -> Crossing:
    # 0.2 s: beyond the gate's one frame of slack, and still above min_clip_duration_s
    duration_s = _clip_duration_s(i)
    return Crossing(clip_gate(i), northwind(), duration_s - 0.2, duration_s + 0.2)


def min_clip_duration(i: Inputs) -> Crossing:
    duration_s = _clip_duration_s(i)
    return Crossing(clip_gate(i), northwind(), duration_s + 0.2, duration_s - 0.2)


# -- ROS 2 content (the ROS 2 example vendor, on ROS 2 flavored episodes) --------------------------------------


def kestrel(raw: bool = False) -> VendorConfig:
    """The ROS 2 example vendor at the inputs' picture size; with ``raw``, its cameras as raw Images."""

    def sized(data: dict[str, Any]) -> None:
        for camera in data["topics"]["cameras"]:
            camera["width_px"], camera["height_px"] = 128, 96
            if raw:
                camera["topic"] = camera["topic"].removesuffix("/compressed")
                camera["schema_names"] = ["sensor_msgs/msg/Image"]

    return _edit(load_vendor(KESTREL), sized)


def camera_formats(i: Inputs) -> Crossing:
    return Crossing(mcap_gate(i.ros2_jpeg), kestrel(), ["png"], ["jpeg"])


def camera_pixel_encodings(i: Inputs) -> Crossing:
    return Crossing(mcap_gate(i.ros2_raw), kestrel(raw=True), ["bgr8"], ["rgb8"])


def camera_size(axis: str) -> Callable[[Inputs], Crossing]:
    def crossing(i: Inputs) -> Crossing:
        vendor = kestrel()
        measured = getattr(_stats(i.ros2_jpeg, vendor, _first(vendor, "cameras").topic).content, f"{axis}_px")
        return Crossing(mcap_gate(i.ros2_jpeg), vendor, measured + 16, measured)

    return crossing


def series_fields(role: str) -> Callable[[Inputs], Crossing]:
    def crossing(i: Inputs) -> Crossing:
        from pipeline.config.propose import first_message_fields

        vendor = kestrel()
        # a field the type has (its first numeric one) against one it lacks
        present = first_message_fields(i.ros2_jpeg)[_first(vendor, role).topic][0]
        return Crossing(mcap_gate(i.ros2_jpeg), vendor, ["no_such_field"], [present])

    return crossing


def decode_every(i: Inputs) -> Crossing:
    from quality_inputs import BAD_HUFFMAN_FRAME

    # every picture decoded finds the damaged table; a stride that skips its frame does not
    lenient = next(n for n in range(2, 30) if BAD_HUFFMAN_FRAME % n)
    return Crossing(mcap_gate(i.bad_huffman), kestrel(), 1, lenient)


CROSSINGS: dict[tuple[str, ReasonCode], Callable[[Inputs], Crossing]] = {
    ("quality.pre.max_gap_rate", R.GAP_RATE_HIGH): gap_rate,
    ("timestamps.max_clock_jump_s", R.CLOCK_JUMP): clock_jump,
    ("timestamps.max_skew_s", R.CLOCK_SKEW): clock_skew,
    ("timestamps.max_backward_steps", R.NON_MONOTONIC_TIME): backward_steps,
    ("timestamps.max_duplicate_timestamps", R.DUPLICATE_TIMESTAMPS): duplicate_timestamps,
    ("quality.pre.min_frames", R.TOO_FEW_FRAMES): min_frames,
    ("quality.pre.min_duration_s", R.DURATION_OUT_OF_BOUNDS): min_duration,
    ("quality.pre.max_duration_s", R.DURATION_OUT_OF_BOUNDS): max_duration,
    ("topics.message_encodings", R.UNSUPPORTED_ENCODING): message_encodings,
    ("topics.schema_encodings", R.UNSUPPORTED_ENCODING): schema_encodings,
    ("topics.compressions", R.UNKNOWN_COMPRESSION): compressions,
    ("ingest.max_record_bytes", R.RECORD_TOO_LARGE): max_record_bytes,
    ("calibration.topics", R.NO_CALIBRATION): calibration_topics,
    ("calibration.sidecar_path", R.NO_CALIBRATION): calibration_sidecar,
    ("video.containers", R.DISALLOWED_CONTAINER): containers,
    ("video.codecs", R.UNSUPPORTED_ENCODING): codecs,
    ("video.min_width_px", R.RESOLUTION_OUT_OF_BOUNDS): size_bound("width", "min"),
    ("video.max_width_px", R.RESOLUTION_OUT_OF_BOUNDS): size_bound("width", "max"),
    ("video.min_height_px", R.RESOLUTION_OUT_OF_BOUNDS): size_bound("height", "min"),
    ("video.max_height_px", R.RESOLUTION_OUT_OF_BOUNDS): size_bound("height", "max"),
    ("video.min_fps", R.FRAME_RATE_OUT_OF_BOUNDS): fps_bound("min"),
    ("video.max_fps", R.FRAME_RATE_OUT_OF_BOUNDS): fps_bound("max"),
    ("quality.pre.blank_luma_stddev_max", R.BLANK_VIDEO): blank_stddev,
    ("quality.pre.max_blank_fraction", R.BLANK_VIDEO): blank_fraction,
    ("quality.pre.letterbox_min_fraction", R.LETTERBOXED): letterbox,
    ("quality.pre.vfr_tolerance_fraction", R.VARIABLE_FRAME_RATE): vfr_tolerance,
    ("ingest.probe_timeout_s", R.PROBE_TIMEOUT): probe_timeout,
    ("ingest.probe_memory_bytes", R.PROBE_RESOURCE_LIMIT): probe_memory,
    ("quality.post.min_psnr_db", R.PSNR_BELOW_THRESHOLD): min_psnr,
    ("quality.post.max_chroma_shift_levels", R.COLOUR_MISMATCH): max_chroma_shift,
    ("quality.post.frame_count_tolerance_frames", R.FRAME_COUNT_MISMATCH): frame_count_tolerance,
    ("quality.post.duration_tolerance_s", R.DURATION_MISMATCH): duration_tolerance,
    ("quality.post.max_resample_rmse", R.RESAMPLE_ERROR): resample_rmse,
    ("transcode.clips.max_clip_duration_s", R.DURATION_MISMATCH): max_clip_duration,
    ("transcode.clips.min_clip_duration_s", R.DURATION_MISMATCH): min_clip_duration,
    ("topics.cameras.formats", R.UNSUPPORTED_ENCODING): camera_formats,
    ("topics.cameras.pixel_encodings", R.UNSUPPORTED_ENCODING): camera_pixel_encodings,
    ("topics.cameras.width_px", R.RESOLUTION_OUT_OF_BOUNDS): camera_size("width"),
    ("topics.cameras.height_px", R.RESOLUTION_OUT_OF_BOUNDS): camera_size("height"),
    ("topics.state.fields", R.SCHEMA_DRIFT): series_fields("state"),
    ("topics.actions.fields", R.SCHEMA_DRIFT): series_fields("actions"),
    ("quality.pre.decode_every_frames", R.DECODE_ERROR): decode_every,
}
for _role in ROLES:
    CROSSINGS |= {
        (f"topics.{_role}.rate_hz", R.GAP_RATE_HIGH): rate_hz(_role),
        (f"topics.{_role}.required", R.MISSING_REQUIRED_TOPIC): topic_required(_role),
        (f"topics.{_role}.message_encodings", R.UNSUPPORTED_ENCODING): topic_message_encodings(_role),
        (f"topics.{_role}.schema_names", R.UNSUPPORTED_ENCODING): topic_schema_names(_role),
    }


def declared_pairs() -> dict[tuple[str, ReasonCode], set[str]]:
    """``(key, reason)`` → the checks the key declares for that reason."""
    pairs: dict[tuple[str, ReasonCode], set[str]] = {}
    for key, entries in config_controls().items():
        for entry in entries:
            pairs.setdefault((key, entry.reason), set()).add(entry.check)
    return pairs


DECLARED = declared_pairs()


def test_every_declaration_has_a_crossing_and_every_crossing_a_declaration() -> None:
    assert sorted(set(DECLARED) - set(CROSSINGS)) == [], "declared controls no test crosses"
    assert sorted(set(CROSSINGS) - set(DECLARED)) == [], "crossings of undeclared controls"


@pytest.mark.parametrize(
    ("key", "reason"), sorted(DECLARED), ids=[f"{k}->{r.value}" for k, r in sorted(DECLARED)]
)
def test_crossing_the_setting_raises_and_clears_its_reason(
    inputs: Inputs, key: str, reason: ReasonCode
) -> None:
    if (key, reason) not in CROSSINGS:
        pytest.fail(f"{key} declares {reason.value} but has no crossing here")
    crossing = CROSSINGS[(key, reason)](inputs)
    checks = DECLARED[(key, reason)]
    strict = raised(crossing.run(with_value(crossing.base, key, crossing.strict)))
    lenient = raised(crossing.run(with_value(crossing.base, key, crossing.lenient)))
    assert any(r is reason and name in checks for name, r in strict), (
        f"{key}={crossing.strict!r} should fail one of {sorted(checks)} with {reason.value}; raised {sorted(strict)}"
    )
    assert not any(r is reason and name in checks for name, r in lenient), (
        f"{key}={crossing.lenient!r} should pass {sorted(checks)}; raised {sorted(lenient)}"
    )
