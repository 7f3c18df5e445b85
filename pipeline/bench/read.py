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
  (random_access's QP 26 lands ~2-3 dB under vla's CRF 23 on this content), so random_access is also
  encoded at the QP that matches vla's PSNR, with the profile's GOP and with a GOP half as long; of the
  candidates within 0.3 dB of vla, the one with the fewest bytes per frame is chosen (on quality and size,
  never on speed), and ``random_access_speedup`` = ms per requested frame of ``vla`` / that candidate's
  (the speedup at the profiles' defaults, the CPU-time speedup, the candidate's bytes ratio and PSNR gap
  are reported beside).
* Entropy coder: ``vla`` and the matched random_access transcoded again with CAVLC instead of CABAC (the
  same pictures): ``cavlc_decode_speedup_vla`` and ``cavlc_bytes_ratio_vla``, and
  ``random_access_speedup_cavlc`` (both profiles with CAVLC).
* Timing: the profiles are sampled in interleaved rounds (each round a slice of the sample times, the
  order rotated), medians of the rounds reported, CPU time beside wall time.
* The layout runs read without decoding (bytes are the point); world_model is timed on fewer samples.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.bench import anchor
from pipeline.config import QualityPost, StampSource, TopicContract, TrainingProfile, TranscodeOptions
from pipeline.errors import UnknownChoiceError
from pipeline.mcaplog.rewrite import rewrite_with_stock_writer
from pipeline.processes import WorkerPool
from pipeline.reader import EpisodeReader, ReadCounters
from pipeline.reader.sample import DEFAULT_COALESCE_GAP_BYTES
from pipeline.settings import Settings
from pipeline.synth import layout as synth_layout
from pipeline.synth.calibration import make_calibration
from pipeline.synth.encode import H264Settings
from pipeline.synth.robot import EpisodeMedia, EpisodeSpec, write_episode
from pipeline.transcode import Provenance, RobotTranscodeConfig, transcode_episode
from pipeline.transcode.postgate import check_episode

log = logging.getLogger(__name__)

#: Episode length, frame size, samples (≥ 200 for the headline), encoder processes, world_model samples
#: (it decodes ~30x more per frame: fewer samples give the same per-frame figures), interleaved timing
#: rounds. 10 s hold 240 sample times at 30 Hz with a full 2 s window and 14-25 GOPs per profile.
SIZES: dict[str, dict[str, Any]] = {
    "default": {
        "seconds": 10.0,
        "width": 1280,
        "height": 720,
        "samples": 200,
        "workers": 2,
        "world_model_samples": 30,
        "rounds": 5,
        "anchor_width": 640,
        "anchor_height": 480,
        "anchor_seconds": 8.0,
        "anchor_rounds": 4,
        "anchor_requests": 8,
    },
    "small": {
        "seconds": 5.0,
        "width": 320,
        "height": 240,
        "samples": 50,
        "workers": 2,
        "world_model_samples": 25,
        "rounds": 3,
        "anchor_width": 320,
        "anchor_height": 240,
        "anchor_seconds": 5.0,
        "anchor_rounds": 2,
        "anchor_requests": 4,
    },
    "large": {
        "seconds": 60.0,
        "width": 1280,
        "height": 720,
        "samples": 1000,
        "workers": 2,
        "world_model_samples": 200,
        "rounds": 5,
        "anchor_width": 640,
        "anchor_height": 480,
        "anchor_seconds": 20.0,
        "anchor_rounds": 6,
        "anchor_requests": 12,
    },
    "tiny": {
        "seconds": 3.0,
        "width": 128,
        "height": 96,
        "samples": 20,
        "workers": 1,
        "world_model_samples": 10,
        "rounds": 2,
        "anchor_width": 128,
        "anchor_height": 96,
        "anchor_seconds": 2.0,
        "anchor_rounds": 1,
        "anchor_requests": 2,
    },  # for tests
}
SEED = 20250602
#: The synthetic logger's default quality.
SOURCE_CRF = 23
#: Quality matching of random_access against vla: stop within 0.3 dB, after at most 3 extra encodes,
#: stepping about one QP per 0.6 dB (x264 on this content at 720p, QP 21-26).
MATCH_TOLERANCE_DB = 0.3
MATCH_TRIES = 3
DB_PER_QP = 0.6
WINDOW_S = 2.0
FRAMES_PER_CAMERA = 2
FRAME_STRIDE_S = 0.1
#: Real footage for the LeRobot anchor's second content: 149 frames of 1280x720 H.264 a camera filmed
#: indoors (a room, a dog, a person moving), from the shared corpus beside the project (never copied in).
DEFAULT_FOOTAGE = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "corpus"
    / "video"
    / "internal_emulator_transformer_output_180_rotated.mp4"
)
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


def make_source_episode(
    path: Path,
    seconds: float,
    width: int,
    height: int,
    seed: int = SEED,
    crf: int = SOURCE_CRF,
    *,
    frame_code: bool = True,
    footage: Path | None = None,
) -> None:
    """One synthetic robot episode (three H.264 cameras, joint states, actions) at ``path``; the cameras
    as a robot logs them (ultrafast, zerolatency, GOP 30) at ``crf``; ``frame_code=False`` draws no frame
    index into the pictures (what a camera would see); ``footage``: a video file the cameras film instead of
    the procedural scene (:mod:`pipeline.synth.footage`)."""
    calibration = make_calibration(seed, 0, "rb01", 0, width, height)
    spec = EpisodeSpec(
        "rb01", "rb01-bench", "rb01-bench-e000", "bench", "op-bench", START_NS, seconds, seed, calibration
    )
    h264 = H264Settings(crf=crf, zero_latency=True)
    media = EpisodeMedia(
        width=width,
        height=height,
        h264=h264,
        frame_code=frame_code,
        footage=None if footage is None else str(footage),
    )
    write_episode(path, spec, media)


def rewrite_default_layout(src: Path, dst: Path) -> None:
    """The same schemas, channels, metadata and messages as the stock writer lays them out by default
    (1 MiB chunks, zstd, every index, all topics interleaved in log-time order)."""
    rewrite_with_stock_writer(src, dst, library="sluice-bench default layout")


def sample_times(reader: EpisodeReader, count: int, seed: int = SEED) -> list[int]:
    """Random sample times with a full window before them."""
    rng = np.random.default_rng(seed)
    low = reader.start_ns + int(WINDOW_S * 1e9)
    return sorted(int(t) for t in rng.integers(low, reader.end_ns, count))


def _sample_all(
    path: Path, times: list[int], *, frames_only: bool = False, decode: bool = True
) -> tuple[ReadCounters, float, float]:
    """Sample ``path`` at ``times``; returns the counters, wall seconds and CPU seconds of the samples."""
    with EpisodeReader(path) as reader:
        wall_s = cpu_s = 0.0
        for t in times:
            wall, cpu = time.perf_counter(), time.process_time()
            reader.sample(
                t,
                window_s=WINDOW_S,
                frames_per_camera=FRAMES_PER_CAMERA,
                frame_stride_s=FRAME_STRIDE_S,
                topics=[] if frames_only else None,
                decode=decode,
            )
            wall_s += time.perf_counter() - wall
            cpu_s += time.process_time() - cpu
        return reader.totals, wall_s, cpu_s


def _time_profiles(
    outputs: dict[str, Path], times: dict[str, list[int]], rounds: int
) -> dict[str, dict[str, Any]]:
    """Frames-only sampling of every output in interleaved turns: the samples are cut into ``rounds``
    slices; each round times every output on its slice (order rotated per round), so load that comes and
    goes on a shared machine falls on every profile alike. Medians of the per-round ms per requested frame
    (wall and CPU) are reported."""
    names = list(outputs)
    slices = {name: [times[name][k::rounds] for k in range(rounds)] for name in names}
    totals = {name: ReadCounters() for name in names}
    wall_ms: dict[str, list[float]] = {name: [] for name in names}
    cpu_ms: dict[str, list[float]] = {name: [] for name in names}
    for k in range(rounds):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            if not slices[name][k]:
                continue
            counters, wall_s, cpu_s = _sample_all(outputs[name], slices[name][k], frames_only=True)
            totals[name].add(counters)
            wall_ms[name].append(1000 * wall_s / counters.frames_returned)
            cpu_ms[name].append(1000 * cpu_s / counters.frames_returned)
    return {
        name: {
            "samples": len(times[name]),
            "decoded_frames_per_frame": round(totals[name].decoded_per_frame, 4),
            "ms_per_requested_frame": round(float(np.median(wall_ms[name])), 4),
            "cpu_ms_per_requested_frame": round(float(np.median(cpu_ms[name])), 4),
            "ms_per_requested_frame_rounds": [round(x, 3) for x in wall_ms[name]],
        }
        for name in names
    }


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

    def __init__(self, source: Path, tmp: Path, pool: Any, workers: int) -> None:
        self.source, self.tmp, self.pool, self.workers = source, tmp, pool, workers
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
            executor_workers=self.workers,
            staging_dir=self.tmp,
        )
        checks = {
            c.name: c for c in check_episode(out, self.source, config, QualityPost(psnr_sample_frames=16))
        }
        psnr = checks["psnr"].observed["cameras"]
        frames = sum(c.frames for c in result.cameras)
        self.outputs[name] = out
        self.figures[name] = {
            "settings": {
                k: getattr(options, k)
                for k in ("gop_frames", "bframes", "crf", "qp", "preset", "entropy_coder")
            },
            "bytes_per_frame": round(sum(c.size_bytes for c in result.cameras) / frames),
            "psnr_mean_db": round(float(np.mean([v["mean_db"] for v in psnr.values()])), 3),
            "psnr_min_db": round(min(v["min_db"] for v in psnr.values()), 3),
            "post_gate_passed": all(c.passed for c in checks.values()),
            "file_bytes": result.size_bytes,
        }
        return self.figures[name]

    def match_quality(self, target_db: float, gop_frames: int, start_qp: int) -> str:
        """The name of a random_access transcode with ``gop_frames`` (every interior frame a B-frame)
        whose PSNR is closest to ``target_db``: QP stepped from ``start_qp`` towards the target (about
        one QP per ``DB_PER_QP``, a few tries), so that profiles are timed at equal quality rather than at
        their defaults. Reuses transcodes already made."""
        default_name = TrainingProfile.RANDOM_ACCESS.value
        default = self.figures[default_name]["settings"]
        own_gop = gop_frames == default["gop_frames"]

        def encode(qp: int) -> str:
            if own_gop and qp == default["qp"]:
                return default_name
            name = f"{default_name}_qp{qp}" if own_gop else f"{default_name}_gop{gop_frames}_qp{qp}"
            if name not in self.figures:
                bframes = default["bframes"] if own_gop else gop_frames - 1
                self.make(name, TrainingProfile.RANDOM_ACCESS, qp=qp, gop_frames=gop_frames, bframes=bframes)
            return name

        qp = start_qp
        best = encode(qp)
        gap = self.figures[best]["psnr_mean_db"] - target_db
        for _ in range(MATCH_TRIES):
            step = round(gap / DB_PER_QP)
            if abs(gap) <= MATCH_TOLERANCE_DB or step == 0:
                break
            qp = max(0, min(51, qp + step))
            name = encode(qp)
            new_gap = self.figures[name]["psnr_mean_db"] - target_db
            if abs(new_gap) >= abs(gap):
                break
            best, gap = name, new_gap
        return best


def _pick_matched(figures: dict[str, dict[str, Any]], candidates: list[str], target_db: float) -> str:
    """Among quality-matched candidates, the one within the PSNR tolerance with the fewest bytes per frame
    (closest to vla's rate), else the one closest in PSNR. Chosen on quality and size, never on speed."""
    close = [c for c in candidates if abs(figures[c]["psnr_mean_db"] - target_db) <= MATCH_TOLERANCE_DB]
    if close:
        return min(close, key=lambda c: figures[c]["bytes_per_frame"])
    return min(candidates, key=lambda c: abs(figures[c]["psnr_mean_db"] - target_db))


def default_footage() -> Path | None:
    """The corpus's real camera clip when the shared corpus sits beside the project, else None."""
    return DEFAULT_FOOTAGE if DEFAULT_FOOTAGE.is_file() else None


def _anchor(folder: Path, p: dict[str, Any], footage: Path | None) -> dict[str, Any]:
    """The LeRobot v3 anchor (:mod:`pipeline.bench.anchor`) on a source episode of its own: the procedural
    scene, or ``footage`` filmed by the three cameras."""
    folder.mkdir()
    source = folder / "source.mcap"
    make_source_episode(
        source, p["anchor_seconds"], p["anchor_width"], p["anchor_height"], frame_code=False, footage=footage
    )
    pools = WorkerPool(p["workers"], name="bench read encoder") if p["workers"] > 1 else nullcontext()
    with pools as pool:
        figures = anchor.run(source, folder, p, pool)
    figures["anchor"]["content"] = "footage" if footage is not None else "procedural scene with grain"
    return figures


def run(size: str, settings: Settings, footage: Path | None = None) -> dict[str, Any]:
    """Run the benchmark (``size``: default, small, large or tiny; ``footage``: the video the anchor's second
    content films, by default the corpus's real camera clip when it is there)."""
    if footage is not None:
        from pipeline.synth.footage import check_footage

        check_footage(footage)
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
            profiles = _Profiles(source, tmp, pool, p["workers"])
            for profile in TrainingProfile:
                profiles.make(profile.value, profile)
            target_db = profiles.figures["vla"]["psnr_mean_db"]
            ra = profiles.figures[TrainingProfile.RANDOM_ACCESS.value]["settings"]
            # the profile's GOP, and a GOP half as long (anchors closer: cheaper P anchor, better B-frames)
            candidates: list[str] = []
            for gop in dict.fromkeys((ra["gop_frames"], ra["gop_frames"] // 2 + 1)):
                # the short GOP starts 2 QP above the long one's match: at equal QP its B-frames, closer
                # to their anchors, come out ~1 dB better on this content
                start = (
                    int(ra["qp"])
                    if not candidates
                    else int(profiles.figures[candidates[0]]["settings"]["qp"]) + 2
                )
                candidates.append(profiles.match_quality(target_db, gop, start))
            matched = _pick_matched(profiles.figures, candidates, target_db)
            # the entropy coder: vla and the matched random_access again with CAVLC (lossless: same
            # pictures, so the same PSNR), to show what it does to decode time and bytes
            profiles.make("vla_cavlc", TrainingProfile.VLA, entropy_coder="cavlc")
            chosen = profiles.figures[matched]["settings"]
            profiles.make(
                f"{matched}_cavlc",
                TrainingProfile.RANDOM_ACCESS,
                entropy_coder="cavlc",
                **{k: chosen[k] for k in ("gop_frames", "bframes", "qp")},
            )
        phase("transcode_and_gate_s")
        vla = profiles.outputs["vla"]
        baseline = tmp / "default_layout.mcap"
        rewrite_default_layout(vla, baseline)
        with EpisodeReader(vla) as reader:
            times = sample_times(reader, p["samples"])
        ours, _, _ = _sample_all(vla, times, decode=False)
        base, _, _ = _sample_all(baseline, times, decode=False)
        phase("layout_samples_s")
        # world_model decodes ~30x more per frame: fewer samples give the same per-frame figures
        # timed: the three profiles at their defaults and the quality-matched random_access candidates
        cavlc = ["vla_cavlc", f"{matched}_cavlc"]
        timed = {
            name: times for name in dict.fromkeys([p_.value for p_ in TrainingProfile] + candidates + cavlc)
        }
        timed["world_model"] = times[:: max(1, len(times) // p["world_model_samples"])]
        outputs = {name: profiles.outputs[name] for name in timed}
        for name, figures in _time_profiles(outputs, timed, p["rounds"]).items():
            profiles.figures[name].update(figures)
        phase("profile_samples_s")
        # the LeRobot v3 anchor: its own source at a robot camera's size, without frame codes, filming the
        # procedural scene, then real footage
        anchored = _anchor(tmp / "anchor", p, None)
        phase("anchor_s")
        footage = footage if footage is not None else default_footage()
        if footage is not None:
            anchored_footage = _anchor(tmp / "anchor_footage", p, footage)
            footage_keys = {
                f"{k}_footage": v
                for k, v in anchored_footage.items()
                if k != "anchor" and k.startswith("lerobot_")
            }
            footage_block = {"footage": str(footage), **anchored_footage["anchor"]}
        else:
            log.warning("no footage for the LeRobot anchor's second content (%s is missing)", DEFAULT_FOOTAGE)
            footage_keys = {}
            footage_block = {"skipped": f"no footage file ({DEFAULT_FOOTAGE} is missing); pass --footage"}
        phase("anchor_footage_s")
    figures = profiles.figures
    ours_fig, base_fig = _figures(ours), _figures(base)
    vla_ms = figures["vla"]["ms_per_requested_frame"]
    return {
        **{k: v for k, v in anchored.items() if k != "anchor"},
        "lerobot_anchor": anchored["anchor"],
        **footage_keys,
        "lerobot_anchor_footage": footage_block,
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
        "random_access_speedup_cpu": round(
            figures["vla"]["cpu_ms_per_requested_frame"] / figures[matched]["cpu_ms_per_requested_frame"], 4
        ),
        "random_access_matched_bytes_ratio": round(
            figures[matched]["bytes_per_frame"] / figures["vla"]["bytes_per_frame"], 4
        ),
        "random_access_matched_psnr_gap_db": round(
            figures[matched]["psnr_mean_db"] - figures["vla"]["psnr_mean_db"], 3
        ),
        "random_access_speedup_at_profile_defaults": round(
            vla_ms / figures["random_access"]["ms_per_requested_frame"], 4
        ),
        "random_access_matched": matched,
        # CAVLC against CABAC: vla's decode speedup and bytes ratio; random_access against vla, both CAVLC
        "cavlc_decode_speedup_vla": round(vla_ms / figures["vla_cavlc"]["ms_per_requested_frame"], 4),
        "cavlc_bytes_ratio_vla": round(
            figures["vla_cavlc"]["bytes_per_frame"] / figures["vla"]["bytes_per_frame"], 4
        ),
        "random_access_speedup_cavlc": round(
            figures["vla_cavlc"]["ms_per_requested_frame"]
            / figures[f"{matched}_cavlc"]["ms_per_requested_frame"],
            4,
        ),
        "random_access_candidates": candidates,
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
        "statistic": "ms per requested frame: median of interleaved rounds (order rotated per round)",
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
