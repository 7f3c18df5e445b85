"""Sizing a run from declared physical limits, and cutting one split into chunks for parallel workers.

The model: a run's files are planned into ``k`` batches (Airflow mapped tasks); at most
``concurrent_batches`` of them run at once (the batch pool), each with ``workers_per_batch`` Ray workers,
so ``workers_total = concurrent_batches × workers_per_batch`` processes are in flight. A worker processes
``worker_bytes_per_s`` (the heaviest step's rate, e.g. decode + re-encode).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.errors import ConfigError
from pipeline.planner.model import CapInfeasibleError, Piece, PlanInputError, Split


@dataclass(frozen=True, slots=True)
class Limits:
    """The cluster's declared physical limits (from configuration, never measured by the planner)."""

    #: Aggregate read throughput from the vendor drop or object store into the workers.
    network_bytes_per_s: float
    #: Aggregate write throughput into the store (derived outputs are about the size of the inputs).
    storage_bytes_per_s: float
    #: Catalog rows per second Postgres absorbs without queueing (upserts with their indexes).
    db_rows_per_s: float
    #: Worker processes the cluster can run at once (Ray CPUs for the heaviest step).
    worker_slots: int
    #: Bytes one worker processes per second in the heaviest step.
    worker_bytes_per_s: float
    #: Catalog rows written per finished file (blob, alias, episode, step run, checks...).
    rows_per_file: float = 1.0
    #: Local disk of one worker: it lands one piece at a time, so every piece must fit (None: no limit).
    worker_scratch_bytes: int | None = None
    #: Batches that may run at once (the Airflow pool of the batch tasks).
    max_concurrent_batches: int = 4
    #: Aim for batches of about this long: a failed batch costs at most this much rework, and the
    #: scheduler sees a few task completions per batch per step, not one per file.
    target_batch_s: float = 1800.0

    def __post_init__(self) -> None:
        problems: list[tuple[str, str]] = []
        for name in (
            "network_bytes_per_s",
            "storage_bytes_per_s",
            "db_rows_per_s",
            "worker_bytes_per_s",
            "rows_per_file",
            "target_batch_s",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                problems.append((name, f"got {value!r}; allowed: a finite number > 0"))
        for name in ("worker_slots", "max_concurrent_batches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append((name, f"got {value!r}; allowed: an int >= 1"))
        scratch = self.worker_scratch_bytes
        if scratch is not None and (isinstance(scratch, bool) or not isinstance(scratch, int) or scratch < 1):
            problems.append(("worker_scratch_bytes", f"got {scratch!r}; allowed: an int >= 1 or None"))
        if problems:
            raise ConfigError("planner limits", problems)


@dataclass(frozen=True, slots=True)
class Sizing:
    """What :func:`choose_k_and_workers` decided, and why (``reasons``, one line per decision)."""

    k: int
    workers_per_batch: int
    concurrent_batches: int
    throughput_bytes_per_s: float
    expected_batch_s: float
    expected_total_s: float
    binding: tuple[str, ...]
    reasons: tuple[str, ...]

    @property
    def workers_total(self) -> int:
        return self.workers_per_batch * self.concurrent_batches


def choose_k_and_workers(total_bytes: int, n_files: int, limits: Limits) -> Sizing:
    """Choose the batch count ``k`` and the workers per batch from the declared limits.

    1. Workers in flight: as many as the slots allow, but no more than the network or the store can feed
       (beyond ``network / worker_rate`` extra workers only wait on I/O), no more than the catalog can
       record (files finish at ``workers × worker_rate / mean_file_bytes`` per second, each writing
       ``rows_per_file`` rows), and no more than there are files. At least one: a limit below one
       worker's rate throttles that worker instead.
    2. Concurrent batches: as many as the batch pool allows, but no more than the workers (a batch needs
       one) and only while sharing the workers out equally leaves at most a tenth of them idle.
    3. ``k``: enough batches that one batch takes about ``target_batch_s`` at its workers' throughput
       (bounded rework on failure, few scheduler events), at least one per concurrent lane so every lane
       is used, and at most one per file. (Scratch disk does not enter: a worker lands one piece at a time,
       and :func:`chunk` cuts pieces to fit it.)
    """
    if isinstance(total_bytes, bool) or not isinstance(total_bytes, int) or total_bytes < 0:
        raise PlanInputError(f"total_bytes={total_bytes!r}; allowed: an int >= 0")
    if isinstance(n_files, bool) or not isinstance(n_files, int) or n_files < 1:
        raise PlanInputError(f"n_files={n_files!r}; allowed: an int >= 1")
    rate = limits.worker_bytes_per_s
    mean_file_bytes = max(total_bytes / n_files, 1.0)
    db_bytes_per_s = limits.db_rows_per_s / limits.rows_per_file * mean_file_bytes
    caps = {
        "worker_slots": float(limits.worker_slots),
        "network_bytes_per_s": limits.network_bytes_per_s / rate,
        "storage_bytes_per_s": limits.storage_bytes_per_s / rate,
        "db_rows_per_s": db_bytes_per_s / rate,
        "n_files": float(n_files),
    }
    workers = max(1, math.floor(min(caps.values())))
    binding = tuple(name for name, cap in caps.items() if math.floor(cap) <= workers)
    reasons = [
        f"workers in flight ≤ {workers}: min over {', '.join(f'{n}→{c:.1f}' for n, c in caps.items())}"
    ]
    # As many lanes as the pool allows (staggered batches overlap, and one slow batch does not hold up the
    # rest) while sharing the workers out equally leaves at most a tenth of them idle: 31 workers and a
    # pool of 4 give 4 × 7; 10 workers give 3 × 3, not 4 × 2.
    concurrent = max(
        c
        for c in range(1, min(limits.max_concurrent_batches, workers) + 1)
        if c * (workers // c) >= 0.9 * workers
    )
    per_batch = workers // concurrent
    workers = concurrent * per_batch
    throughput = min(workers * rate, limits.network_bytes_per_s, limits.storage_bytes_per_s, db_bytes_per_s)
    batch_throughput = throughput / concurrent
    reasons.append(
        f"{concurrent} concurrent batches of {per_batch} workers (pool {limits.max_concurrent_batches}); "
        f"throughput {throughput:.4g} B/s (workers × {rate:.4g} B/s, capped by network, store, catalog)"
    )
    by_time = math.ceil(total_bytes / (batch_throughput * limits.target_batch_s)) if total_bytes else 1
    k = max(1, by_time, concurrent)
    reasons.append(
        f"k ≥ {by_time} for batches of ≈ {limits.target_batch_s:g} s; ≥ {concurrent} to fill the lanes"
    )
    if k > n_files:
        reasons.append(f"k capped at {n_files}: one batch per file at most")
        k = n_files
    batch_s = total_bytes / k / batch_throughput if total_bytes else 0.0
    total_s = batch_s * math.ceil(k / concurrent)
    return Sizing(k, per_batch, concurrent, throughput, batch_s, total_s, binding, tuple(reasons))


def chunk(split: Split, workers: int, limits: Limits | None = None) -> tuple[tuple[Piece, ...], ...]:
    """Break one split into at most ``workers`` chunks of near-equal bytes, one per parallel worker.

    Splittable pieces larger than a worker's share (split bytes / workers), or than the worker's scratch
    disk, are cut into time ranges first (a quarter share at most), then the pieces are dealt LPT-style.
    ``limits`` caps the workers at ``worker_slots``. Empty chunks are left out; an unsplittable piece that
    cannot fit a worker's scratch raises :class:`CapInfeasibleError`.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise PlanInputError(f"workers={workers!r}; allowed: an int >= 1")
    if limits is not None:
        workers = min(workers, limits.worker_slots)
    scratch = limits.worker_scratch_bytes if limits is not None else None
    share = split.size_bytes / workers
    # Quarter shares, like the planner's cut: small enough for LPT to even the workers out. A worker
    # handles its pieces one at a time, so each piece (not the worker's whole chunk) must fit its scratch.
    piece_limit = share / 4 if scratch is None else min(share / 4, float(scratch))
    pieces: list[Piece] = []
    for piece in split.pieces:
        too_big_for_scratch = scratch is not None and piece.size_bytes > scratch
        if piece.splittable and piece_limit > 0 and (piece.size_bytes > share or too_big_for_scratch):
            pieces.extend(piece.cut(math.ceil(piece.size_bytes / piece_limit)))
        elif too_big_for_scratch:
            raise CapInfeasibleError(
                "worker_scratch_bytes",
                float(scratch or 0),
                f"piece {piece.id!r} has {piece.size_bytes} bytes and is not splittable",
            )
        else:
            pieces.append(piece)
    return _deal(pieces, workers)


def _deal(pieces: Sequence[Piece], workers: int) -> tuple[tuple[Piece, ...], ...]:
    """LPT: largest piece first to the lightest worker; ties by position, so the result is deterministic."""
    order = sorted(range(len(pieces)), key=lambda i: (-pieces[i].size_bytes, i))
    heap = [(0, j) for j in range(workers)]
    groups: list[list[int]] = [[] for _ in range(workers)]
    for i in order:
        load, j = heapq.heappop(heap)
        groups[j].append(i)
        heapq.heappush(heap, (load + pieces[i].size_bytes, j))
    return tuple(tuple(pieces[i] for i in sorted(g)) for g in groups if g)
