"""Planning a run's files into batches from the vendor's limits and caps (no database)."""

from __future__ import annotations

from pathlib import Path

import pytest
from orchestrate_helpers import write_vendor

from pipeline.orchestrate import PlannedFile, make_plan
from pipeline.planner import CapInfeasibleError


def _files(sizes: list[int]) -> list[PlannedFile]:
    return [PlannedFile(f"f{i:03d}.mcap", size) for i, size in enumerate(sizes)]


def _with_planner(tmp_path: Path, **planner: object):  # type: ignore[no-untyped-def]
    vendor = write_vendor(tmp_path, tmp_path)
    return vendor.model_copy(update={"planner": vendor.planner.model_copy(update=planner)})


def test_every_file_lands_in_exactly_one_batch_of_near_equal_bytes(tmp_path: Path) -> None:
    sizes = [100, 90, 80, 70, 60, 50, 40, 30, 20, 10]
    plan = make_plan(_with_planner(tmp_path, min_splits=3, max_splits=3), _files(sizes))
    assert len(plan.batches) == 3
    paths = [f.path for batch in plan.batches for f in batch.files]
    assert sorted(paths) == sorted(f.path for f in _files(sizes))
    loads = [batch.planned_bytes for batch in plan.batches]
    assert sum(loads) == sum(sizes) and max(loads) <= 190  # lower bound 550 / 3 ≈ 184
    assert plan.figures["k"] == 3 and plan.figures["violations"] == []


def test_the_files_cap_raises_the_number_of_batches(tmp_path: Path) -> None:
    plan = make_plan(
        _with_planner(tmp_path, min_splits=1, max_splits=10, max_files_per_split=3), _files([5] * 10)
    )
    assert len(plan.batches) == 4
    assert max(len(b.files) for b in plan.batches) <= 3


def test_caps_that_cannot_be_met_within_max_splits_are_refused(tmp_path: Path) -> None:
    vendor = _with_planner(tmp_path, min_splits=1, max_splits=2, max_files_per_split=3)
    with pytest.raises(CapInfeasibleError, match="max_files"):
        make_plan(vendor, _files([5] * 10))


def test_never_more_batches_than_files(tmp_path: Path) -> None:
    plan = make_plan(_with_planner(tmp_path, min_splits=8, max_splits=8), _files([10, 20]))
    assert len(plan.batches) == 2


def test_batches_start_at_least_batch_stagger_s_apart(tmp_path: Path) -> None:
    plan = make_plan(
        _with_planner(tmp_path, min_splits=4, max_splits=4, batch_stagger_s=5.0), _files([10] * 8)
    )
    assert [b.start_offset_s for b in plan.batches] == [0.0, 5.0, 10.0, 15.0]
    lockstep = make_plan(
        _with_planner(tmp_path, min_splits=4, max_splits=4, batch_stagger_s=0.0), _files([10] * 8)
    )
    # Without a configured gap the starts still spread over one expected step duration (tiny here).
    spread = max(b.start_offset_s for b in lockstep.batches)
    assert spread <= lockstep.figures["expected_batch_s"] < 1.0


def test_no_files_no_batches(tmp_path: Path) -> None:
    assert make_plan(_with_planner(tmp_path), []).batches == ()
