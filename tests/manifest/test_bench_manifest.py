"""`sluice bench manifest` end to end on a tiny manifest (figures are not asserted: a bench is no test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bench import manifest as bench
from pipeline.errors import UnknownChoiceError
from pipeline.manifest import format as mf
from pipeline.settings import load_settings


@pytest.mark.slow
def test_bench_measures_every_mode_on_the_same_rows(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    results = bench.run("2000", settings, world_size=2)
    for key in ("rss_ratio", "first_batch_speedup", "row_groups_rss_ratio", "cold_first_batch_speedup"):
        assert isinstance(results[key], float)
    assert results["slices_agree"] is True
    assert results["download"]["downloaded"] is True and results["downloads_by_ranks"] == 0
    assert [r["rows"] for r in results["per_rank"]["read_all"]] == [1000, 1000]
    assert {r["mode"] for r in results["cold"].values()} == set(bench.MODES)
    # the generated manifest is kept and reused by the next run
    folder = tmp_path / "bench" / "manifest" / f"rows-2000-v{bench.GENERATOR_VERSION}"
    written = (folder / mf.IPC_FILE_NAME).stat().st_mtime_ns
    assert bench.ensure_manifest(folder, 2000).ipc_sha256 == results["ipc_sha256"]
    assert (folder / mf.IPC_FILE_NAME).stat().st_mtime_ns == written


def test_generated_table_is_a_valid_manifest() -> None:
    table = bench.generate_table(5000)
    conformed = mf.conform_table(table)  # raises on any schema or value problem
    assert conformed.num_rows == 5000
    assert len(set(conformed.column(mf.EPISODE_ID).to_pylist())) == 5000
    assert 0 < conformed.column(mf.QUALITY_TRANSCODE).null_count < 500


def test_sizes_parse_and_bad_ones_are_named() -> None:
    assert bench.parse_size("default") == 10_000_000
    assert bench.parse_size("2m") == 2_000_000
    assert bench.parse_size("250k") == 250_000
    assert bench.parse_size("1234") == 1234
    with pytest.raises(UnknownChoiceError, match="unknown manifest bench size 'huge'"):
        bench.parse_size("huge")
