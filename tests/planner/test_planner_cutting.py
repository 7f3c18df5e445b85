"""Time-range chunks and the cutting of oversize items."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pipeline.errors import ConfigError, UnknownChoiceError
from pipeline.planner import CapInfeasibleError, Caps, Item, Piece, PlanInputError, cut


def test_chunks_cover_the_item_once_and_carry_parent_and_range(covers_exactly_once) -> None:
    item = Item("vendor/log.mcap", 1_000_003, cost=9.0, duration_s=120.0, splittable=True)
    chunks = Piece.whole(item).cut(3)
    covers_exactly_once([item], chunks)
    assert [c.id for c in chunks] == [
        "vendor/log.mcap[0.000s,40.000s)",
        "vendor/log.mcap[40.000s,80.000s)",
        "vendor/log.mcap[80.000s,120.000s)",
    ]
    assert [(c.start_s, c.end_s) for c in chunks] == [(0.0, 40.0), (40.0, 80.0), (80.0, 120.0)]


def test_chunk_ids_without_duration_carry_the_fraction() -> None:
    chunks = Piece.whole(Item("clip", 10, splittable=True)).cut(4)
    assert chunks[1].id == "clip[0.25,0.5)"
    assert chunks[1].start_s is None


def test_recutting_a_chunk_stays_inside_its_range(covers_exactly_once) -> None:
    item = Item("a", 999_999_937, cost=1.0, splittable=True)
    first, second, third = Piece.whole(item).cut(3)
    finer = second.cut(7)
    assert finer[0].start_fraction == Fraction(1, 3) and finer[-1].end_fraction == Fraction(2, 3)
    covers_exactly_once([item], [first, *finer, third])


def test_an_unsplittable_item_is_never_cut() -> None:
    with pytest.raises(PlanInputError, match="not splittable"):
        Piece.whole(Item("a", 100)).cut(2)


def test_cut_splits_items_larger_than_a_fair_share_and_leaves_small_ones(covers_exactly_once) -> None:
    items = [Item("big", 8_000, splittable=True), Item("stuck", 3_000)] + [
        Item(f"s{i}", 100, splittable=True) for i in range(10)
    ]
    k = 4  # fair share = 12_000 / 4 = 3_000; pieces at most a quarter of it
    pieces = cut(items, k)
    covers_exactly_once(items, pieces)
    big = [p for p in pieces if p.item_id == "big"]
    assert len(big) == 11  # ceil(8_000 / 750)
    assert all(p.size_bytes <= 750 for p in big)
    assert [p.id for p in pieces if p.item_id == "stuck"] == ["stuck"]
    assert all(p.is_whole for p in pieces if p.item_id.startswith("s"))


def test_cut_respects_a_cost_cap_smaller_than_the_share() -> None:
    items = [Item("hot", 10, cost=50.0, splittable=True)] + [Item(f"c{i}", 10, cost=1.0) for i in range(50)]
    pieces = cut(items, 2, Caps(max_cost=20.0))
    hot = [p for p in pieces if p.item_id == "hot"]
    assert all((p.cost or 0) <= 0.25 * 20.0 + 1e-12 for p in hot)
    assert len(hot) == 10


def test_an_unsplittable_item_over_a_cap_is_named() -> None:
    items = [Item("huge", 5_000), Item("b", 10)]
    with pytest.raises(CapInfeasibleError, match="max_bytes") as err:
        cut(items, 2, Caps(max_bytes=1_000))
    assert err.value.cap == "max_bytes"
    assert "huge" in str(err.value)


@pytest.mark.parametrize(
    ("items", "kwargs", "message"),
    [
        ([Item("a", 1), Item("a", 2)], {}, "appears twice"),
        ([Item("a", 1)], {"objective": "cost"}, "has no cost"),
        ([Item("a", 1)], {"caps": Caps(max_cost=3.0)}, "has no cost"),
        ([Item("a", 1)], {"k": 0}, "k=0"),
    ],
)
def test_bad_inputs_name_the_value(items, kwargs, message) -> None:
    with pytest.raises(PlanInputError, match=message):
        cut(items, **{"k": 2, **kwargs})


def test_unknown_objective_lists_the_allowed_ones() -> None:
    with pytest.raises(UnknownChoiceError, match="allowed: bytes, cost"):
        cut([Item("a", 1)], 2, objective="frames")  # type: ignore[arg-type]


def test_bad_caps_and_items_are_rejected_on_construction() -> None:
    with pytest.raises(ConfigError, match="max_files"):
        Caps(max_files=0)
    with pytest.raises(ConfigError, match="max_cost"):
        Caps(max_cost=float("nan"))
    with pytest.raises(PlanInputError, match="size_bytes=-1"):
        Item("a", -1)
