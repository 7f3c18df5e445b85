"""``sluice bench read`` runs end to end at a tiny size and reports its headline keys (no speed is judged
here), the LeRobot v3 anchor on both its contents: the procedural scene and the corpus's real footage."""

from __future__ import annotations

import math
from pathlib import Path

from typer.testing import CliRunner

from pipeline.bench import read
from pipeline.cli import app
from pipeline.settings import load_settings
from pipeline.synth.footage import FootageError

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


FOOTAGE_KEYS = tuple(f"{k}_footage" for k in READ_KEYS if k.startswith("lerobot_"))


def test_read_bench_reports_every_headline_key(corpus_dir: Path) -> None:
    results = read.run("tiny", load_settings())
    for key in (*READ_KEYS, *FOOTAGE_KEYS, "lerobot_payload_ratio_h265_slow"):
        assert isinstance(results[key], float) and math.isfinite(results[key]), key
    # the second content films the corpus's real camera clip, found beside the project by default
    footage = results["lerobot_anchor_footage"]
    assert Path(footage["footage"]).samefile(
        corpus_dir / "video/internal_emulator_transformer_output_180_rotated.mp4"
    )
    assert footage["content"] == "footage" and results["lerobot_anchor"]["content"].startswith("procedural")
    assert abs(results["lerobot_psnr_gap_db_footage"]) <= 0.2
    # the two contents differ: the same contender spends other bytes on them
    assert (
        footage["contenders"]["lerobot_v3"]["bytes_per_frame"]
        != (results["lerobot_anchor"]["contenders"]["lerobot_v3"]["bytes_per_frame"])
    )
    # pooled PSNR beside the matched mean, and the slow-preset H.265 payload, matched but not timed
    for anchor in (results["lerobot_anchor"], footage):
        contenders = anchor["contenders"]
        assert all(isinstance(c["psnr_pooled_db"], float) for c in contenders.values())
        assert contenders["ddra_h265_slow"]["settings"]["preset"] == "slow"
        assert "timing" not in contenders["ddra_h265_slow"]
        # through the cap our reader coalesces only the gaps worth a request's latency there: never more
        # bytes than from local disk
        for name in ("ddra_h264", "ddra_h265"):
            timing = contenders[name]["timing"]
            for pattern in anchor["patterns"]:
                capped, uncapped = timing["capped"][pattern], timing["uncapped"][pattern]
                assert capped["bytes_read_per_frame"] <= uncapped["bytes_read_per_frame"]

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


def test_sluice_bench_read_footage_option_is_checked(tmp_path: Path) -> None:
    runner = CliRunner()
    refused = runner.invoke(app, ["bench", "plan", "--footage", str(tmp_path / "x.mp4")])
    assert refused.exit_code == 2 and "--footage is an option of the read bench" in refused.output
    missing = runner.invoke(app, ["bench", "read", "--size", "tiny", "--footage", str(tmp_path / "x.mp4")])
    assert isinstance(missing.exception, FootageError) and "x.mp4: no such file" in str(missing.exception)


def test_the_capped_link_coalesces_smaller_gaps() -> None:
    from pipeline.bench.contenders import coalesce_gap_bytes
    from pipeline.reader.sample import DEFAULT_COALESCE_GAP_BYTES

    # the reader's default is the rule at a local NVMe drive's ~2.5 GB/s; a 100 MiB/s link gets ~10 KiB
    assert 0.8 < coalesce_gap_bytes(2.5e9) / DEFAULT_COALESCE_GAP_BYTES < 1.2
    assert coalesce_gap_bytes(100 * 2**20) == 10485
