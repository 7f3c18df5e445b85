"""Cut large items into time-range chunks before assigning them.

On heavy-tailed sizes the largest file, not the assignment, limits the balance: at k = 64 it exceeds
total / k in every n ≤ 1,000 case measured (MEASURED.md), and no solver fixes that. So every splittable item
larger than a fair share (total / k) is cut, as the orchestration issue asks, and so is every splittable item
larger than ``max_piece_share`` of a fair share: no piece is larger than that, in the objective or in a
capped resource (where the cap, if smaller than the fair share, takes its place).

Why cut below a whole share: an uncut item of 0.99 share fills a split on its own, and with caps on files
and cost binding the solver then cannot even out the rest. Measured with the plan benchmark's data (caps 3%
above the means), cutting only items above a whole share left n = 1,000, k = 8 at imbalance 1.017 and
n = 100, k = 64 at 1.08; cutting everything above a quarter share reached 1.0003 and 1.0015, for 4 and 42
more pieces. At n = 10,000, k = 64 (no file near a quarter share) it changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pipeline.errors import UnknownChoiceError
from pipeline.planner.model import (
    OBJECTIVES,
    CapInfeasibleError,
    Caps,
    Item,
    Objective,
    Piece,
    PlanInputError,
)

#: A quarter of a fair share (see the module doc): finer pieces would add catalog rows and per-chunk
#: overhead for balance the solver already reaches.
DEFAULT_MAX_PIECE_SHARE = 0.25


def validate(items: Sequence[Item], k: int, caps: Caps, objective: str) -> None:
    """Raise on inputs the planner cannot work with (the message names the bad value)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise PlanInputError(f"k={k!r}; allowed: an int >= 1")
    if objective not in OBJECTIVES:
        raise UnknownChoiceError("objective", objective, OBJECTIVES)
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise PlanInputError(f"item id {item.id!r} appears twice; allowed: unique ids")
        seen.add(item.id)
    if objective == "cost" or caps.max_cost is not None:
        why = "objective='cost'" if objective == "cost" else f"max_cost={caps.max_cost:g}"
        for item in items:
            if item.cost is None:
                raise PlanInputError(
                    f"item {item.id!r} has no cost, which {why} needs; allowed: a number >= 0"
                )


def resources(caps: Caps, objective: Objective) -> tuple[str, ...]:
    """Per-piece quantities that must be kept small: the objective's and every capped one (files aside)."""
    out = ["size_bytes" if objective == "bytes" else "cost"]
    if caps.max_bytes is not None and "size_bytes" not in out:
        out.append("size_bytes")
    if caps.max_cost is not None and "cost" not in out:
        out.append("cost")
    return tuple(out)


def cut(
    items: Sequence[Item],
    k: int,
    caps: Caps | None = None,
    objective: Objective = "bytes",
    *,
    max_piece_share: float = DEFAULT_MAX_PIECE_SHARE,
) -> tuple[Piece, ...]:
    """Return the pieces to assign: whole items, and equal time-range chunks of the large splittable ones.

    A splittable item larger than ``max_piece_share`` × min(fair share, cap) in the objective or a capped
    resource is cut into the fewest equal chunks that are all within that limit (nothing is cut when
    ``k == 1``). An unsplittable item larger than a cap raises :class:`CapInfeasibleError` naming the cap.
    """
    caps = caps or Caps()
    validate(items, k, caps, objective)
    if not 0 < max_piece_share <= 1:
        raise PlanInputError(f"max_piece_share={max_piece_share!r}; allowed: 0 < share <= 1")
    caps_by_field = {"size_bytes": caps.max_bytes, "cost": caps.max_cost}
    cap_names = {"size_bytes": "max_bytes", "cost": "max_cost"}
    limits: dict[str, float] = {}
    for name in resources(caps, objective):
        share = math.fsum(float(getattr(it, name) or 0.0) for it in items) / k
        cap = caps_by_field[name]
        limits[name] = max_piece_share * (share if cap is None else min(share, float(cap)))
    pieces: list[Piece] = []
    for item in items:
        parts = 1
        for name, piece_limit in limits.items():
            value = float(getattr(item, name) or 0.0)
            cap = caps_by_field[name]
            if not item.splittable:
                if cap is not None and value > cap:
                    raise CapInfeasibleError(
                        cap_names[name],
                        float(cap),
                        f"item {item.id!r} has {name}={value:g} and is not splittable",
                    )
                continue
            # With one split there is nothing to balance: cutting would only add pieces.
            if k > 1 and piece_limit > 0 and value > piece_limit:
                parts = max(parts, math.ceil(value / piece_limit))
        pieces.extend(Piece.whole(item).cut(parts))
    return tuple(pieces)
