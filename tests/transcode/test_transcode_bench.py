"""Both benchmarks run end to end at a tiny size and report their headline keys (no speed is judged here)."""

from __future__ import annotations

import math

from pipeline.bench import read, transcode
from pipeline.settings import load_settings

READ_KEYS = (
    "read_amplification",
    "decompress_amplification",
    "reads_per_sample",
    "baseline_read_amplification",
    "baseline_decompress_amplification",
    "baseline_reads_per_sample",
    "decoded_frames_per_frame_random_access",
    "decoded_frames_per_frame_vla",
    "decoded_frames_per_frame_world_model",
    "random_access_speedup",
    "cavlc_decode_speedup_vla",
    "cavlc_bytes_ratio_vla",
    "random_access_speedup_cavlc",
    # the LeRobot v3 anchor
    "lerobot_speedup_h264",
    "lerobot_speedup_h265",
    "lerobot_speedup_h264_uncapped",
    "lerobot_speedup_h265_uncapped",
    "lerobot_payload_ratio_h264",
    "lerobot_payload_ratio_h265",
    "lerobot_psnr_gap_db",
    "decoded_frames_per_frame_ddra",
    "native_sparse_decoded_frames_per_frame",
    "native_sequential_decoded_frames_per_frame",
)


def test_read_bench_reports_every_headline_key() -> None:
    results = read.run("tiny", load_settings())
    for key in READ_KEYS:
        assert isinstance(results[key], float) and math.isfinite(results[key]), key
    assert results["samples"] == 20
    assert results["decoded_frames_per_frame_random_access"] <= 3.0
    assert results["decoded_frames_per_frame_world_model"] > results["decoded_frames_per_frame_vla"]
    assert results["baseline_read_amplification"] > results["read_amplification"]
    assert all(p["post_gate_passed"] for p in results["profiles"].values())
    # quality matched by search, every DDRA read at most its two anchors per frame, the native source's
    # merged closures never costlier than a sequential read
    assert abs(results["lerobot_psnr_gap_db"]) <= 0.2
    assert results["decoded_frames_per_frame_ddra"] <= 3.0
    assert (
        results["native_sparse_decoded_frames_per_frame"]
        <= results["native_sequential_decoded_frames_per_frame"]
    )
    anchor = results["lerobot_anchor"]
    for name in ("lerobot_v3", "ddra_h264", "ddra_h264_cavlc", "ddra_h265", "jpeg"):
        timing = anchor["contenders"][name]["timing"]
        assert set(timing) == {"capped", "uncapped"} and set(timing["capped"]) == set(anchor["patterns"])
    assert anchor["contenders"]["lerobot_v3"]["settings"] == {
        "encoder": "libsvtav1",
        "g": 2,
        "crf": 30,
        "preset": 12,
    }
    profiles = results["profiles"]
    matched = results["random_access_matched"]
    for cabac, cavlc in (("vla", "vla_cavlc"), (matched, f"{matched}_cavlc")):
        assert profiles[cavlc]["settings"]["entropy_coder"] == "cavlc"
        # entropy coding is lossless: the same QP/CRF gives the same pictures, give or take x264's
        # rate-distortion choices seeing other bit costs
        assert abs(profiles[cavlc]["psnr_mean_db"] - profiles[cabac]["psnr_mean_db"]) < 0.3


def test_transcode_bench_reports_its_ratio() -> None:
    results = transcode.run("tiny", load_settings())
    assert isinstance(results["transcode_ratio"], float) and results["transcode_ratio"] > 0
    assert results["frames"] == 90  # 1 s, 3 cameras at 30 Hz
