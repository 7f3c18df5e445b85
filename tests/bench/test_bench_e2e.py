"""``sluice bench e2e --size small``: a new vendor's drop through its DAG (through the scheduler, and with
``airflow dags test`` beside it) to a first batch, then data stall.

Not a timed test: it checks that the benchmark measures what it says (every phase present and adding up,
the DAG's tasks all accounted for, stall figures that are shares of wall time, a prefetching loader
stalling less than a synchronous one at the same step time) on the real pipeline.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]


@pytest.fixture
def reachable_home() -> Iterator[Path]:
    # Outside pytest's private tmp folder: run as root, the bench's Postgres runs as the postgres user.
    base = Path(tempfile.mkdtemp(prefix="sluice-bench-e2e-"))
    base.chmod(0o755)
    yield base / "home"
    shutil.rmtree(base, ignore_errors=True)


def test_e2e_bench_reports_first_batch_and_stall(reachable_home: Path, tmp_path: Path) -> None:
    from pipeline.bench import e2e
    from pipeline.report.html import bench_section

    result = e2e.run("small", Settings(home=reachable_home))

    phases = result["phase_seconds"]
    assert set(phases) == {"dag", "dataset", "manifest", "first_batch"}
    assert all(v > 0 for v in phases.values())
    assert result["time_to_first_batch_s"] == pytest.approx(sum(phases.values()), abs=0.01)
    # Through the scheduler, with what the scheduler itself cost beside the `airflow dags test` figure.
    steps = ("discover", "plan", "ingest", "quality_pre", "transcode", "quality_post", "warehouse_sync")
    for key in ("", "_dags_test"):
        tasks = result[f"dag_task_seconds{key}"]
        for task in steps:
            assert tasks[task] > 0, (key, task)
        assert sum(tasks.values()) < result[f"phase_seconds{key}"]["dag"]
    assert result["time_to_first_batch_dags_test_s"] == pytest.approx(
        sum(result["phase_seconds_dags_test"].values()), abs=0.01
    )
    waits = [result[f"scheduler_queue_latency_s_{q}"] for q in ("median", "p90", "max")]
    assert 0 < waits[0] <= waits[1] <= waits[2] <= result["scheduler_queue_latency_s_total"]
    assert result["dag_scheduler_overhead_s"] > 0
    options = e2e.SIZES["small"]
    assert result["episodes"] == options["episodes"] == result["manifest_rows"]
    assert result["first_batch_samples"] == options["batch_size"]
    for key in ("data_stall_pct", "data_stall_pct_synchronous", "data_stall_pct_steady"):
        assert 0 <= result[key] < 100
    # A synchronous loader waits for every batch; prefetching overlaps reading with the step.
    assert result["data_stall_pct"] < result["data_stall_pct_synchronous"]
    # every step of the prefetching loop: the measured ones and the warm-up before the steady state
    assert len(result["wait_ms_per_step"]) == options["warmup_steps"] + options["steps"]
    assert [row["step_ms"] for row in result["stall_by_step_ms"]] == options["step_ms_sweep"]
    # `sluice report RUN --bench e2e.json` shows both headline figures and plots the two series.
    saved = tmp_path / "e2e.json"
    saved.write_text(json.dumps(result))
    section = bench_section(saved)
    assert {"time_to_first_batch_s", "data_stall_pct"} <= set(section["figures"])
    plotted = "".join(section["plots"])
    assert "wait_ms_per_step" in plotted and "data_stall_pct_over_step_ms" in plotted
    # Nothing is left behind: the throwaway Postgres and the run folder are gone.
    assert not any((reachable_home / "bench" / "e2e").iterdir())
