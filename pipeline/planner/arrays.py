"""The pieces as integer arrays: what the heuristics and the CP-SAT model work on.

CP-SAT needs integers. Files and bytes are integers already; a float cost is scaled so that the whole
batch is about 10^12 units and each piece's cost is rounded *up* while the cap is rounded *down*: a split
the integer model accepts is then within the real cap too (the conservatism is at most one unit per piece,
about 10^-12 of the total).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.planner.model import CapName, Caps, Objective, Piece

#: Total cost maps to this many integer units: fine enough to be exact in practice, small enough that
#: sums of a few hundred thousand pieces stay far inside int64.
COST_UNITS_TOTAL = 10**12


@dataclass(frozen=True)
class Arrays:
    """Per-piece objective weights, per-piece capped quantities (integers) and the caps."""

    weight: np.ndarray  # float64 (n,): the objective's quantity per piece
    req: np.ndarray  # int64 (n, r): one column per set cap
    cap: np.ndarray  # int64 (r,)
    cap_names: tuple[CapName, ...]
    splittable: np.ndarray  # bool (n,)
    k: int

    @property
    def n(self) -> int:
        return len(self.weight)

    def lower_bound(self) -> float:
        """max(total / k, largest unsplittable piece): no assignment can beat it."""
        total = math.fsum(self.weight.tolist())
        unsplittable = self.weight[~self.splittable]
        largest = float(unsplittable.max()) if len(unsplittable) else 0.0
        return max(total / self.k, largest)

    def loads(self, assignment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Objective load per split (float) and capped quantities per split (int64, shape (k, r))."""
        obj = np.bincount(assignment, self.weight, self.k)
        # bincount sums in float64, exact for integers below 2**53 (≈ 9 PB, or 9000× the cost scale).
        req = np.zeros((self.k, self.req.shape[1]), dtype=np.int64)
        for r in range(self.req.shape[1]):
            req[:, r] = np.rint(np.bincount(assignment, self.req[:, r], self.k)).astype(np.int64)
        return obj, req

    def excess(self, req_loads: np.ndarray) -> float:
        """Total relative excess over the caps (0 when every split is within every cap)."""
        if not len(self.cap):
            return 0.0
        return float((np.maximum(req_loads - self.cap, 0) / self.cap).sum())


def build(pieces: Sequence[Piece], k: int, caps: Caps, objective: Objective) -> Arrays:
    """The integer view of ``pieces`` for ``k`` splits under ``caps``."""
    n = len(pieces)
    size = np.fromiter((p.size_bytes for p in pieces), dtype=np.int64, count=n)
    cost = np.fromiter((p.cost or 0.0 for p in pieces), dtype=np.float64, count=n)
    weight = size.astype(np.float64) if objective == "bytes" else cost
    columns: list[np.ndarray] = []
    limits: list[int] = []
    names: list[CapName] = []
    if caps.max_files is not None:
        columns.append(np.ones(n, dtype=np.int64))
        limits.append(caps.max_files)
        names.append("max_files")
    if caps.max_bytes is not None:
        columns.append(size)
        limits.append(caps.max_bytes)
        names.append("max_bytes")
    if caps.max_cost is not None:
        total = math.fsum(cost.tolist())
        scale = COST_UNITS_TOTAL / total if total > 0 else 1.0
        columns.append(np.ceil(cost * scale).astype(np.int64))
        limits.append(math.floor(caps.max_cost * scale))
        names.append("max_cost")
    req = np.stack(columns, axis=1) if columns else np.zeros((n, 0), dtype=np.int64)
    splittable = np.fromiter((p.splittable for p in pieces), dtype=bool, count=n)
    return Arrays(weight, req, np.array(limits, dtype=np.int64), tuple(names), splittable, k)
