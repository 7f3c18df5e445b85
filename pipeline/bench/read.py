"""``sluice bench read``: what a training sample costs to read from a transcoded episode.

A sample is "2 s of state and actions plus 2 frames from each of 3 cameras at a random time" (frames at
``t - 0.1 s`` and ``t``), read with :class:`pipeline.reader.EpisodeReader` at ≥ 200 random times.

* Layout: our transcoded episode (``vla`` profile) against the same messages and metadata rewritten by the
  stock ``mcap`` writer with its defaults (1 MiB chunks, zstd, all topics interleaved in time order), read
  by the same reader with the same plan: ``read_amplification`` (bytes read / bytes used),
  ``decompress_amplification`` and ``reads_per_sample``, and the ``baseline_`` figures. Bytes used are the
  message records the sample needs: the window's state/action messages and each requested frame's
  dependencies (keyframe and reference frames up to it).
* Profiles: the same source transcoded as ``vla``, ``world_model`` and ``random_access``; for each,
  frames decoded per requested frame and milliseconds per requested frame (frames only), beside bytes
  per frame and the post-gate's PSNR against the source. The profile defaults do not give equal quality
  (random_access's QP 26 lands ~3 dB under vla's CRF 23 on this content), so random_access is also
  encoded at the QP that matches vla's PSNR, and ``random_access_speedup`` = ms per requested frame of
  ``vla`` / that matched ``random_access`` (the speedup at the profiles' defaults is reported beside).
* The layout runs read without decoding (bytes are the point); world_model is timed on fewer samples.
"""

from __future__ import annotations

import logging
import multiprocessing
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
from mcap.reader import make_reader
from mcap.writer import Writer

from pipeline.config import QualityPost, StampSource, TopicContract, TrainingProfile, TranscodeOptions
from pipeline.errors import UnknownChoiceError
from pipeline.reader import EpisodeReader, ReadCounters
from pipeline.reader.sample import DEFAULT_COALESCE_GAP_BYTES
from pipeline.settings import Settings
from pipeline.synth import layout as synth_layout
from pipeline.synth.calibration import make_calibration
from pipeline.synth.robot import EpisodeMedia, EpisodeSpec, write_episode
from pipeline.transcode import Provenance, RobotTranscodeConfig, transcode_episode
from pipeline.transcode.postgate import check_episode

log = logging.getLogger(__name__)

SIZES: dict[str, dict[str, Any]] = {
    "default": {
        "seconds": 20.0,
        "width": 1280,
        "height": 720,
        "samples": 200,
        "workers": 2,
        "world_model_samples": 50,
    },
    "small": {
        "seconds": 5.0,
        "width": 320,
        "height": 240,
        "samples": 50,
        "workers": 2,
        "world_model_samples": 25,
    },
    "large": {
        "seconds": 60.0,
        "width": 1280,
        "height": 720,
        "samples": 1000,
        "workers": 2,
        "world_model_samples": 200,
    },
    "tiny": {
        "seconds": 3.0,
        "width": 128,
        "height": 96,
        "samples": 20,
        "workers": 1,
        "world_model_samples": 10,
    },  # for tests
}
SEED = 20250602
#: Quality matching of random_access against vla: stop within 0.3 dB, after at most 3 extra encodes,
#: stepping about one QP per 0.8 dB (x264 at these rates).
MATCH_TOLERANCE_DB = 0.3
MATCH_TRIES = 3
DB_PER_QP = 0.8
WINDOW_S = 2.0
FRAMES_PER_CAMERA = 2
FRAME_STRIDE_S = 0.1
#: Episodes of the synthetic drop start here (a fixed clock, for determinism).
START_NS = 1_748_851_200_000_000_000


def robot_config(profile: TrainingProfile) -> RobotTranscodeConfig:
    """The synthetic robot layout's contract with a profile's defaults (what acme_robotics uses)."""
    cameras = [
        {
            "name": name,
            "topic": synth_layout.camera_topic(name),
            "rate_hz": synth_layout.CAMERA_RATE_HZ,
            "message_encodings": ["protobuf"],
            "stamp_field": "timestamp",
        }
        for name in synth_layout.CAMERA_NAMES
    ]
    contract = TopicContract.model_validate(
        {
            "cameras": cameras,
            "state": [
                {
                    "topic": synth_layout.JOINT_STATE_TOPIC,
                    "rate_hz": synth_layout.JOINT_STATE_RATE_HZ,
                    "message_encodings": ["json"],
                    "stamp_field": "stamp_ns",
                }
            ],
            "actions": [
                {
                    "topic": synth_layout.ACTION_TOPIC,
                    "rate_hz": synth_layout.ACTION_RATE_HZ,
                    "message_encodings": ["json"],
                    "stamp_field": "stamp_ns",
                }
            ],
        }
    )
    return RobotTranscodeConfig(
        TranscodeOptions.model_validate({"profile": profile.value}), contract, StampSource.HARDWARE
    )


def make_source_episode(path: Path, seconds: float, width: int, height: int, seed: int = SEED) -> None:
    """One synthetic robot episode (three H.264 cameras, joint states, actions) at ``path``."""
    calibration = make_calibration(seed, 0, "rb01", 0, width, height)
    spec = EpisodeSpec(
        "rb01", "rb01-bench", "rb01-bench-e000", "bench", "op-bench", START_NS, seconds, seed, calibration
    )
    write_episode(path, spec, EpisodeMedia(width=width, height=height))


def rewrite_default_layout(src: Path, dst: Path) -> None:
    """The same schemas, channels, metadata and messages as the stock writer lays them out by default."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        reader = make_reader(fin)
        summary = reader.get_summary()
        assert summary is not None
        writer = Writer(fout)  # defaults: 1 MiB chunks, zstd, every index
        writer.start(profile="", library="sluice-bench default layout")
        schema_ids = {
            sid: writer.register_schema(s.name, s.encoding, s.data)
            for sid, s in sorted(summary.schemas.items())
        }
        channel_ids = {
            cid: writer.register_channel(
                c.topic, c.message_encoding, schema_ids.get(c.schema_id, 0), dict(c.metadata)
            )
            for cid, c in sorted(summary.channels.items())
        }
        for m in reader.iter_metadata():
            writer.add_metadata(m.name, dict(m.metadata))
        for _, channel, message in reader.iter_messages(log_time_order=True):
            writer.add_message(
                channel_ids[channel.id],
                message.log_time,
                message.data,
                message.publish_time,
                message.sequence,
            )
        writer.finish()


def sample_times(reader: EpisodeReader, count: int, seed: int = SEED) -> list[int]:
    """Random sample times with a full window before them."""
    rng = np.random.default_rng(seed)
    low = reader.start_ns + int(WINDOW_S * 1e9)
    return sorted(int(t) for t in rng.integers(low, reader.end_ns, count))


def _sample_all(
    path: Path, times: list[int], *, frames_only: bool = False, decode: bool = True
) -> tuple[ReadCounters, float]:
    with EpisodeReader(path) as reader:
        elapsed = 0.0
        for t in times:
            started = time.perf_counter()
            reader.sample(
                t,
                window_s=WINDOW_S,
                frames_per_camera=FRAMES_PER_CAMERA,
                frame_stride_s=FRAME_STRIDE_S,
                topics=[] if frames_only else None,
                decode=decode,
            )
            elapsed += time.perf_counter() - started
        return reader.totals, elapsed


def _figures(c: ReadCounters) -> dict[str, float]:
    return {
        "read_amplification": round(c.read_amplification, 4),
        "decompress_amplification": round(c.decompress_amplification, 4),
        "reads_per_sample": round(c.reads_per_sample, 4),
        "bytes_read_per_sample": round(c.bytes_read / c.samples),
        "bytes_decompressed_per_sample": round(c.bytes_decompressed / c.samples),
        "bytes_used_per_sample": round(c.bytes_used / c.samples),
    }


class _Profiles:
    """Transcodes of the source under each profile, with their post-gate PSNR and bytes per frame."""

    def __init__(self, source: Path, tmp: Path, pool: Any) -> None:
        self.source, self.tmp, self.pool = source, tmp, pool
        self.outputs: dict[str, Path] = {}
        self.figures: dict[str, dict[str, Any]] = {}

    def make(self, name: str, profile: TrainingProfile, **overrides: Any) -> dict[str, Any]:
        options = TranscodeOptions.model_validate({"profile": profile.value, **overrides})
        config = RobotTranscodeConfig(options, robot_config(profile).contract, StampSource.HARDWARE)
        out = self.tmp / name / "episode.mcap"
        result = transcode_episode(
            self.source,
            out,
            config,
            Provenance("0" * 64, "bench", "bench"),
            executor=self.pool,
            staging_dir=self.tmp,
        )
        checks = {
            c.name: c for c in check_episode(out, self.source, config, QualityPost(psnr_sample_frames=16))
        }
        psnr = checks["psnr"].observed["cameras"]
        frames = sum(c.frames for c in result.cameras)
        self.outputs[name] = out
        self.figures[name] = {
            "settings": {k: getattr(options, k) for k in ("gop_frames", "bframes", "crf", "qp", "preset")},
            "bytes_per_frame": round(sum(c.size_bytes for c in result.cameras) / frames),
            "psnr_mean_db": round(float(np.mean([v["mean_db"] for v in psnr.values()])), 3),
            "psnr_min_db": round(min(v["min_db"] for v in psnr.values()), 3),
            "post_gate_passed": all(c.passed for c in checks.values()),
            "file_bytes": result.size_bytes,
        }
        return self.figures[name]

    def match_quality(self, target_db: float) -> str:
        """The name of a random_access transcode whose PSNR is closest to ``target_db``: the profile's own,
        or one re-encoded at a QP stepped towards the target (about one QP per 0.8 dB, a few tries), so
        that profiles are timed at equal quality rather than at their defaults."""
        best = TrainingProfile.RANDOM_ACCESS.value
        gap = self.figures[best]["psnr_mean_db"] - target_db
        qp = int(self.figures[best]["settings"]["qp"])
        for _ in range(MATCH_TRIES):
            step = round(gap / DB_PER_QP)
            if abs(gap) <= MATCH_TOLERANCE_DB or step == 0:
                break
            qp = max(0, min(51, qp + step))
            name = f"random_access_qp{qp}"
            new_gap = self.make(name, TrainingProfile.RANDOM_ACCESS, qp=qp)["psnr_mean_db"] - target_db
            if abs(new_gap) >= abs(gap):
                break
            best, gap = name, new_gap
        return best


def run(size: str, settings: Settings) -> dict[str, Any]:
    """Run the benchmark (``size``: default, small, large or tiny)."""
    if size not in SIZES:
        raise UnknownChoiceError("size", size, SIZES)
    p = SIZES[size]
    phases: dict[str, float] = {}
    clock = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[name] = round(now - clock, 2)
        clock = now

    with tempfile.TemporaryDirectory(prefix="sluice-bench-read-") as tmp_text:
        tmp = Path(tmp_text)
        source = tmp / "source.mcap"
        make_source_episode(source, p["seconds"], p["width"], p["height"])
        phase("synth_s")
        spawn = multiprocessing.get_context("spawn")
        pools = ProcessPoolExecutor(p["workers"], mp_context=spawn) if p["workers"] > 1 else nullcontext()
        with pools as pool:
            profiles = _Profiles(source, tmp, pool)
            for profile in TrainingProfile:
                profiles.make(profile.value, profile)
            matched = profiles.match_quality(profiles.figures["vla"]["psnr_mean_db"])
        phase("transcode_and_gate_s")
        vla = profiles.outputs["vla"]
        baseline = tmp / "default_layout.mcap"
        rewrite_default_layout(vla, baseline)
        with EpisodeReader(vla) as reader:
            times = sample_times(reader, p["samples"])
        ours, _ = _sample_all(vla, times, decode=False)
        base, _ = _sample_all(baseline, times, decode=False)
        phase("layout_samples_s")
        # world_model decodes ~30x more per frame: fewer samples give the same per-frame figures
        timed = {name: times for name in profiles.outputs}
        timed["world_model"] = times[:: max(1, len(times) // p["world_model_samples"])]
        for name, out in profiles.outputs.items():
            counters, elapsed = _sample_all(out, timed[name], frames_only=True)
            profiles.figures[name].update(
                samples=len(timed[name]),
                decoded_frames_per_frame=round(counters.decoded_per_frame, 4),
                ms_per_requested_frame=round(1000 * elapsed / counters.frames_returned, 4),
            )
        phase("profile_samples_s")
    figures = profiles.figures
    ours_fig, base_fig = _figures(ours), _figures(base)
    vla_ms = figures["vla"]["ms_per_requested_frame"]
    return {
        "read_amplification": ours_fig["read_amplification"],
        "decompress_amplification": ours_fig["decompress_amplification"],
        "reads_per_sample": ours_fig["reads_per_sample"],
        "baseline_read_amplification": base_fig["read_amplification"],
        "baseline_decompress_amplification": base_fig["decompress_amplification"],
        "baseline_reads_per_sample": base_fig["reads_per_sample"],
        "decoded_frames_per_frame_random_access": figures["random_access"]["decoded_frames_per_frame"],
        "decoded_frames_per_frame_vla": figures["vla"]["decoded_frames_per_frame"],
        "decoded_frames_per_frame_world_model": figures["world_model"]["decoded_frames_per_frame"],
        # at equal quality: random_access re-encoded at the QP that matches vla's PSNR
        "random_access_speedup": round(vla_ms / figures[matched]["ms_per_requested_frame"], 4),
        "random_access_speedup_at_profile_defaults": round(
            vla_ms / figures["random_access"]["ms_per_requested_frame"], 4
        ),
        "random_access_matched": matched,
        "sample": f"{WINDOW_S:g} s of state+actions, {FRAMES_PER_CAMERA} frames x 3 cameras "
        f"{FRAME_STRIDE_S:g} s apart",
        "ours": ours_fig,
        "baseline": base_fig,
        "profiles": figures,
        "samples": len(times),
        "episode_seconds": p["seconds"],
        "frame_size": f"{p['width']}x{p['height']}",
        "coalesce_gap_bytes": DEFAULT_COALESCE_GAP_BYTES,
        "phases": phases,
    }
