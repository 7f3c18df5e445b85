"""Assign shards to training ranks so that every rank reads near-equal bytes, with the batch planner.

Shards are whole items (never cut), so the planner's bound is max(total / ranks, largest shard); with
shards of one target size it is met within a fraction of a shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: The planner's wall-time limit for a rank assignment: a dataset's shards are few (thousands at most).
RANK_PLAN_TIME_LIMIT_S = 2.0


@dataclass(frozen=True)
class RankAssignment:
    """``ranks[r]`` lists the shard URIs of rank ``r``; ``imbalance`` = largest rank / its lower bound."""

    ranks: tuple[tuple[str, ...], ...]
    bytes_per_rank: tuple[int, ...]
    imbalance: float
    method: str

    @property
    def idle_ranks(self) -> list[int]:
        """Ranks given no shard (more ranks than shards): nothing to read, and a distributed job waits on
        them at its first collective. The imbalance cannot show them: no rank holds less than the largest
        shard, the bound it is measured against."""
        return [rank for rank, uris in enumerate(self.ranks) if not uris]


def assign_ranks(shards: Sequence[tuple[str, int]], world_size: int) -> RankAssignment:
    """Assign ``(uri, size_bytes)`` shards to ``world_size`` ranks with near-equal bytes."""
    from pipeline.planner import Item, split
    from pipeline.planner.model import PlanInputError

    if world_size < 1:
        raise PlanInputError(f"world_size={world_size}; allowed: an int >= 1")
    if not shards:
        return RankAssignment(tuple(() for _ in range(world_size)), (0,) * world_size, 1.0, "none")
    items = [Item(uri, int(size)) for uri, size in shards]
    plan = split(items, world_size, objective="bytes", time_limit_s=RANK_PLAN_TIME_LIMIT_S)
    order = {uri: i for i, (uri, _) in enumerate(shards)}
    ranks = tuple(tuple(sorted((p.item_id for p in s.pieces), key=order.__getitem__)) for s in plan.splits)
    return RankAssignment(
        ranks=ranks,
        bytes_per_rank=tuple(s.size_bytes for s in plan.splits),
        imbalance=plan.imbalance,
        method=plan.method,
    )
