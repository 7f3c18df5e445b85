"""The transcode benchmark runs end to end at a tiny size and reports its headline keys (no speed is judged
here); the read benchmark's test is tests/bench/test_bench_read.py."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
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
    # the host's processor is named: runs on different hosts do not pool
    assert saved["machine"]["cpu_model"] and saved["machine"]["cpus"] >= 1
    assert "payload_ratio_vs_jpeg" in result.output
    refused = CliRunner().invoke(app, ["bench", "plan", "--source", "jpeg"])
    assert refused.exit_code == 2 and "--source is an option of the transcode bench" in refused.output


def test_the_interval_of_a_ratio_narrows_with_rounds_and_keeps_rounds_paired() -> None:
    rng = np.random.default_rng(7)
    # noise of each run on its own: the interval narrows with more rounds and holds the true ratio
    reference = list(6.0 * rng.normal(1.0, 0.03, 40))
    ours = list(6.2 * rng.normal(1.0, 0.03, 40))
    few = transcode.ratio_interval(reference[:5], ours[:5])
    many = transcode.ratio_interval(reference, ours)
    assert few is not None and many is not None
    assert many[0] <= 6.0 / 6.2 <= many[1]
    assert many[1] - many[0] < 0.6 * (few[1] - few[0])
    # both contenders slowed alike by the load of each round: kept paired, the load cancels out;
    # with the rounds shuffled apart it does not
    load = rng.normal(1.0, 0.05, 40)
    loaded_reference = list(6.0 * load * rng.normal(1.0, 0.005, 40))
    loaded_ours = list(6.2 * load * rng.normal(1.0, 0.005, 40))
    paired = transcode.ratio_interval(loaded_reference, loaded_ours)
    unpaired = transcode.ratio_interval(loaded_reference, list(rng.permutation(loaded_ours)))
    assert paired is not None and unpaired is not None
    assert paired[0] <= 6.0 / 6.2 <= paired[1]
    assert unpaired[1] - unpaired[0] > 2 * (paired[1] - paired[0])
    assert transcode.ratio_interval(reference[:2], ours[:2]) is None  # too few rounds to resample
    with pytest.raises(ValueError, match="3 reference rounds against 2"):
        transcode.ratio_interval(reference[:3], ours[:2])


def test_sluice_bench_transcode_rounds_sets_the_rounds_and_reports_intervals(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from pipeline.cli import app

    out = tmp_path / "transcode.json"
    args = ["bench", "transcode", "--size", "tiny", "--rounds", "3", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["rounds"] == 3 and all(len(v) == 3 for v in saved["wall_seconds"].values())
    for key in ("transcode_ratio_vs_decode_encode", "cpu_ratio_vs_decode_encode"):
        low, high = saved["ci95"][key]
        assert 0 < low <= high, key
    # one worker: no pool, so every CPU second was this process's
    assert all(v == [0.0] * 3 for v in saved["cpu_seconds_pool"].values())
    beyond = saved["cpu_beyond_decode_encode_s"]
    assert beyond["pool"] == 0 and beyond["caller"] == beyond["total"]
    refused = CliRunner().invoke(app, ["bench", "plan", "--rounds", "3"])
    assert refused.exit_code == 2 and "--rounds is an option of the transcode bench" in refused.output
    zero = CliRunner().invoke(app, ["bench", "transcode", "--size", "tiny", "--rounds", "0"])
    assert zero.exit_code == 2 and "--rounds" in zero.output


@pytest.mark.slow
def test_the_cpu_of_the_pool_processes_is_reported_apart() -> None:
    results = transcode.run("small", load_settings(), rounds=1)  # two pool processes
    assert results["workers"] == 2
    for name, total in results["cpu_seconds"].items():
        (in_pool,) = results["cpu_seconds_pool"][name]
        # every contender's codec work ran in the pool; the caller's share is what is left
        assert 0 < in_pool <= total[0], name
    beyond = results["cpu_beyond_decode_encode_s"]
    ours_caller = results["cpu_seconds"]["ours"][0] - results["cpu_seconds_pool"]["ours"][0]
    bare_caller = (
        results["cpu_seconds"]["decode_encode_dealt"][0]
        - results["cpu_seconds_pool"]["decode_encode_dealt"][0]
    )
    assert beyond["caller"] == pytest.approx(ours_caller - bare_caller, abs=0.002)


@pytest.mark.parametrize("size", ["0", "0.1B", "0GB", "tiny", "-5MB"])
def test_sluice_bench_ingest_refuses_a_size_it_cannot_make_before_any_work(
    size: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench command refuses a size of the ingest bench as it does the others (no drop is made)."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    monkeypatch.setenv("SLUICE_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, ["bench", "ingest", "--size", size])
    assert isinstance(result.exception, UnknownChoiceError), result.exception
    assert str(result.exception) == (
        f"unknown ingest bench size {size!r}; allowed: a size of at least 1 byte (e.g. 500MB or 2GB), default"
    )
    assert not (tmp_path / "home").exists()
