"""Sizing from declared limits, and cutting one split into chunks for parallel workers."""

from __future__ import annotations

import math

import pytest

from pipeline.errors import ConfigError
from pipeline.planner import CapInfeasibleError, Item, Limits, Piece, Split, choose_k_and_workers, chunk

GB = 1_000_000_000
MB = 1_000_000


def _limits(**overrides: object) -> Limits:
    base: dict[str, object] = {
        "network_bytes_per_s": 1.25 * GB,  # 10 Gbit/s
        "storage_bytes_per_s": 2 * GB,
        "db_rows_per_s": 2_000.0,
        "worker_slots": 64,
        "worker_bytes_per_s": 40 * MB,
        "rows_per_file": 20.0,
        "worker_scratch_bytes": 50 * GB,
        "max_concurrent_batches": 4,
        "target_batch_s": 1_800.0,
    }
    return Limits(**{**base, **overrides})  # type: ignore[arg-type]


CASES = {
    "slots bind": _limits(network_bytes_per_s=10 * GB, storage_bytes_per_s=10 * GB),
    "network binds at 31 workers": _limits(),
    "network binds": _limits(network_bytes_per_s=400 * MB),
    "storage binds": _limits(storage_bytes_per_s=300 * MB),
    "catalog binds": _limits(db_rows_per_s=50.0),
    "one worker throttled": _limits(network_bytes_per_s=10 * MB),
    "few slots, small pool": _limits(worker_slots=8, max_concurrent_batches=2),
    "tiny pool": _limits(max_concurrent_batches=1),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize(("total_bytes", "n_files"), [(50 * 1_000 * GB, 20_000), (30 * GB, 100), (5 * GB, 3)])
def test_choose_k_respects_every_declared_limit(name, total_bytes, n_files) -> None:
    limits = CASES[name]
    sizing = choose_k_and_workers(total_bytes, n_files, limits)
    workers = sizing.workers_total
    rate = limits.worker_bytes_per_s
    files_per_s = sizing.throughput_bytes_per_s / (total_bytes / n_files)
    assert 1 <= workers <= limits.worker_slots
    assert workers <= n_files
    assert sizing.concurrent_batches <= limits.max_concurrent_batches
    assert sizing.throughput_bytes_per_s <= min(limits.network_bytes_per_s, limits.storage_bytes_per_s) + 1e-6
    assert files_per_s * limits.rows_per_file <= limits.db_rows_per_s * (1 + 1e-9)
    if workers > 1:  # one worker may run throttled below its rate; more must all be fed
        assert workers * rate <= limits.network_bytes_per_s
        assert workers * rate <= limits.storage_bytes_per_s
        assert workers * rate / (total_bytes / n_files) * limits.rows_per_file <= limits.db_rows_per_s * (
            1 + 1e-9
        )
    assert 1 <= sizing.k <= n_files
    if sizing.k < n_files:
        assert sizing.k >= sizing.concurrent_batches
        assert sizing.expected_batch_s <= limits.target_batch_s
    assert sizing.reasons


def test_the_binding_limit_is_named_and_relaxing_it_adds_workers() -> None:
    tight = choose_k_and_workers(50_000 * GB, 20_000, _limits(network_bytes_per_s=400 * MB))
    loose = choose_k_and_workers(50_000 * GB, 20_000, _limits(network_bytes_per_s=800 * MB))
    assert "network_bytes_per_s" in tight.binding
    assert 9 <= tight.workers_total <= 10  # 400 MB/s / 40 MB/s, shared out equally over the lanes
    assert 18 <= loose.workers_total <= 20
    roomy = choose_k_and_workers(50_000 * GB, 20_000, CASES["slots bind"])
    assert roomy.binding == ("worker_slots",)
    assert roomy.workers_total == 64


def test_longer_target_batches_mean_fewer_batches() -> None:
    short = choose_k_and_workers(50_000 * GB, 20_000, _limits(target_batch_s=600.0))
    long = choose_k_and_workers(50_000 * GB, 20_000, _limits(target_batch_s=3_600.0))
    assert long.k < short.k
    assert 1_800.0 < long.expected_batch_s <= 3_600.0


def test_bad_limits_are_named() -> None:
    with pytest.raises(ConfigError, match="worker_slots"):
        _limits(worker_slots=0)
    with pytest.raises(ConfigError, match="network_bytes_per_s"):
        _limits(network_bytes_per_s=-1.0)


def _split(pieces: list[Piece]) -> Split:
    return Split.of(0, tuple(pieces))


def test_chunk_balances_workers_and_cuts_what_is_too_big(covers_exactly_once) -> None:
    items = [Item("long", 900, duration_s=90.0, splittable=True)] + [Item(f"s{i}", 25) for i in range(12)]
    groups = chunk(_split([Piece.whole(i) for i in items]), 4)
    assert len(groups) == 4
    covers_exactly_once(items, [p for g in groups for p in g])
    loads = [sum(p.size_bytes for p in g) for g in groups]
    assert max(loads) <= 1.1 * sum(loads) / 4


def test_chunk_never_exceeds_the_worker_slots() -> None:
    pieces = [Piece.whole(Item(f"s{i}", 10)) for i in range(20)]
    assert len(chunk(_split(pieces), 16, _limits(worker_slots=3))) == 3


def test_chunk_fits_every_piece_in_a_worker_scratch(covers_exactly_once) -> None:
    items = [Item("big", 10 * GB, splittable=True), Item("small", GB)]
    groups = chunk(_split([Piece.whole(i) for i in items]), 2, _limits(worker_scratch_bytes=3 * GB))
    assert all(p.size_bytes <= 3 * GB for g in groups for p in g)
    covers_exactly_once(items, [p for g in groups for p in g])


def test_an_unsplittable_piece_over_the_scratch_is_named() -> None:
    split = _split([Piece.whole(Item("big", 10 * GB))])
    with pytest.raises(CapInfeasibleError, match="worker_scratch_bytes"):
        chunk(split, 2, _limits(worker_scratch_bytes=3 * GB))


def test_chunk_is_deterministic() -> None:
    pieces = [Piece.whole(Item(f"s{i}", (i * 7919) % 101 + 1)) for i in range(50)]
    assert chunk(_split(pieces), 5) == chunk(_split(list(pieces)), 5)
    assert math.isclose(
        sum(p.size_bytes for g in chunk(_split(pieces), 5) for p in g), _split(pieces).size_bytes
    )
