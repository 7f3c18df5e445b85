"""Helpers shared by the planner tests: heavy-tailed inputs and a coverage check."""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable
from fractions import Fraction

import pytest

from pipeline.planner import Item, Piece


def heavy_tailed_items(n: int, seed: int, *, splittable_share: float = 1.0) -> list[Item]:
    """Lognormal sizes (1 MB – 20 GB) and a cost that is not proportional to bytes (as in the benchmark)."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        size = int(min(max(rng.lognormvariate(math.log(300e6), 1.6), 1e6), 20e9))
        duration_s = size / rng.lognormvariate(math.log(1.5e6), 0.5)
        cost = duration_s * rng.choice((0.33, 1.0, 2.25, 9.0)) * rng.choice((1.0, 1.8, 3.0))
        # Unsplittable ones are kept under 500 MB, so that no single one breaks a cap on its own.
        splittable = size > 500e6 or rng.random() < splittable_share
        items.append(Item(f"f{i:04d}", size, cost, duration_s, splittable=splittable))
    return items


def assert_covers_exactly_once(items: Iterable[Item], pieces: Iterable[Piece]) -> None:
    """Every item appears whole, or as chunks covering [0, 1) exactly once whose bytes add up."""
    by_item: dict[str, list[Piece]] = defaultdict(list)
    for piece in pieces:
        by_item[piece.item_id].append(piece)
    items = list(items)
    assert set(by_item) == {i.id for i in items}
    for item in items:
        chunks = sorted(by_item[item.id], key=lambda p: p.start_fraction)
        assert chunks[0].start_fraction == 0
        assert chunks[-1].end_fraction == 1
        for before, after in itertools.pairwise(chunks):
            assert before.end_fraction == after.start_fraction, f"gap or overlap in {item.id}"
        assert sum(p.size_bytes for p in chunks) == item.size_bytes
        assert sum((p.end_fraction - p.start_fraction for p in chunks), Fraction(0)) == 1
        if item.cost is not None:
            assert math.isclose(sum(p.cost or 0.0 for p in chunks), item.cost, rel_tol=1e-9)
        assert len({p.id for p in chunks}) == len(chunks)


@pytest.fixture
def make_items() -> Callable[..., list[Item]]:
    """Factory: ``make_items(n, seed, splittable_share=1.0)``."""
    return heavy_tailed_items


@pytest.fixture
def covers_exactly_once() -> Callable[[Iterable[Item], Iterable[Piece]], None]:
    return assert_covers_exactly_once
