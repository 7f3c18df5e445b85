"""Start offsets that keep identical steps of different batches (and vendors) from finishing together."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import pytest

from pipeline.planner import PlanInputError, stagger, stagger_vendors


def _completions(offsets: tuple[float, ...], step_s: float, steps: int) -> list[float]:
    """When each step of each batch finishes, all steps taking ``step_s``."""
    return [offset + (s + 1) * step_s for offset in offsets for s in range(steps)]


@pytest.mark.parametrize(("n_batches", "step_s"), [(1, 30.0), (8, 60.0), (60, 60.0), (7, 7.0), (100, 3600.0)])
def test_equal_steps_never_finish_in_the_same_second(n_batches, step_s) -> None:
    offsets = stagger(n_batches, step_s)
    done = sorted(_completions(offsets, step_s, steps=5))
    # Across batches and across steps: every completion at least a second from the next one.
    assert all(b - a >= 1.0 - 1e-9 for a, b in itertools.pairwise(done))
    assert len({math.floor(t) for t in done}) == len(done)


def test_lockstep_is_what_it_prevents() -> None:
    done = _completions((0.0,) * 8, 60.0, steps=5)
    assert len(set(done)) == 5  # 8 batches finish each step at the same instant


@pytest.mark.parametrize(("n_batches", "step_s"), [(8, 60.0), (3, 600.0), (200, 60.0)])
def test_offsets_spread_over_at_least_one_step(n_batches, step_s) -> None:
    offsets = stagger(n_batches, step_s)
    assert offsets[0] == 0.0
    assert list(offsets) == sorted(offsets)
    span = offsets[-1] + (offsets[-1] - offsets[-2] if n_batches > 1 else step_s)
    assert span >= step_s - 1e-3
    assert min(b - a for a, b in itertools.pairwise(offsets)) >= 1.0 - 1e-3  # the default min gap


def test_more_batches_than_seconds_keep_the_minimum_gap() -> None:
    offsets = stagger(120, 60.0, min_gap_s=2.0)
    assert min(b - a for a, b in itertools.pairwise(offsets)) == pytest.approx(2.0)


def test_stagger_is_deterministic_and_validates() -> None:
    assert stagger(13, 97.0) == stagger(13, 97.0)
    assert stagger(0, 60.0) == ()
    with pytest.raises(PlanInputError, match="n_batches=-1"):
        stagger(-1, 60.0)
    with pytest.raises(PlanInputError, match="step_duration_s"):
        stagger(3, float("inf"))


def test_vendor_offsets_are_spread_and_independent_of_order() -> None:
    vendors = ["delta", "acme", "cobalt", "bluefield", "eastgate"]
    offsets = stagger_vendors(vendors, 3600.0)
    assert offsets == stagger_vendors(sorted(vendors, reverse=True), 3600.0)
    values = sorted(offsets.values())
    assert values[0] == 0.0 and values[-1] < 3600.0
    assert all(v % 60 == 0 for v in values)
    assert min(b - a for a, b in itertools.pairwise(values)) >= 660  # 3600 / 5 = 720, floored to minutes


def test_vendor_offsets_reject_duplicates_and_bad_periods() -> None:
    with pytest.raises(PlanInputError, match="repeat"):
        stagger_vendors(["a", "a"], 3600.0)
    with pytest.raises(PlanInputError, match="period_s"):
        stagger_vendors(["a"], 0.0)


def test_the_light_api_imports_without_numpy_or_ortools() -> None:
    """The DAG factory calls stagger_vendors at parse time: importing it must stay cheap."""
    code = (
        "import sys; from pipeline.planner import stagger_vendors, stagger, choose_k_and_workers, Item; "
        "print(','.join(m for m in ('numpy', 'ortools', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
