"""The transcode benchmark runs end to end at a tiny size and reports its headline keys (no speed is judged
here); the read benchmark's test is tests/bench/test_bench_read.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeline.bench import transcode
from pipeline.errors import UnknownChoiceError
from pipeline.settings import load_settings

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
