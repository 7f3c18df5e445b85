"""Both benchmarks run end to end at a tiny size and report their headline keys (no speed is judged here)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeline.bench import read, transcode
from pipeline.errors import UnknownChoiceError
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


TRANSCODE_KEYS = (
    "transcode_ratio",
    "transcode_ratio_vs_decode_encode",
    "cpu_ratio",
    "cpu_ratio_vs_decode_encode",
    "payload_ratio_vs_source",
    "psnr_vs_source_db",
)


@pytest.mark.parametrize("source", ["h264", "jpeg"])
def test_transcode_bench_reports_its_ratios(source: str) -> None:
    results = transcode.run("tiny", load_settings(), source=source)
    for key in (*TRANSCODE_KEYS, f"payload_ratio_vs_{source}", f"psnr_vs_{source}_db"):
        assert isinstance(results[key], float) and math.isfinite(results[key]) and results[key] > 0, key
    assert results["frames"] == 90  # 1 s, 3 cameras at 30 Hz
    assert results["source"]["format"] == source
    # every output frame was compared with the source picture it came from, at the post-gate's quality
    assert 30 < results["psnr_vs_source_db"] < 60
    if source == "jpeg":
        assert results["source"]["messages"] == "ros2 CompressedImage"
        assert results["payload_ratio_vs_jpeg"] < 0.5  # H.264 of independent JPEG pictures is smaller


def test_transcode_bench_names_its_sources() -> None:
    with pytest.raises(UnknownChoiceError, match="jpeg"):
        transcode.run("tiny", load_settings(), source="gif")


def test_sluice_bench_transcode_source_jpeg_writes_its_results(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from pipeline.cli import app

    out = tmp_path / "results" / "transcode-jpeg.json"
    args = ["bench", "transcode", "--size", "tiny", "--source", "jpeg", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["bench"] == "transcode" and saved["source"]["format"] == "jpeg"
    assert "payload_ratio_vs_jpeg" in result.output
    refused = CliRunner().invoke(app, ["bench", "plan", "--source", "jpeg"])
    assert refused.exit_code == 2 and "--source is an option of the transcode bench" in refused.output
