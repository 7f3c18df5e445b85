"""Group near-duplicate episodes from their fingerprints (pure logic, no database).

Two episodes are near-duplicates when

* their message fingerprints are equal (the same recording re-chunked, recompressed or with re-encoded
  cameras: the non-camera message bytes did not change), or
* their videos match: at least ``min_match_fraction`` of the shorter one's frame hashes have a hash in the
  other within ``max_hamming`` bits (the same footage re-encoded, rescaled or cut differently).

Candidate video pairs come from band buckets: each 64-bit hash is cut into ``max_hamming + 1`` bands, and
two hashes within ``max_hamming`` bits must agree on at least one band (pigeonhole), so bucketing finds every
matching pair without comparing all pairs. Matches are joined by union-find: groups are the connected
components, so A~B and B~C put A, B and C in one group.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import Field

from pipeline.annotate.imageops import PHASH_BITS, hamming
from pipeline.config.types import FrozenModel


class DedupParams(FrozenModel):
    """Thresholds of near-duplicate grouping."""

    # Re-encodes and rescales of the same footage move 0-4 of 64 bits; different scenes of the synthetic
    # data move 12 or more (measured), and real footage typically half: 8 keeps a margin on both sides.
    max_hamming: int = Field(
        default=8, ge=0, lt=PHASH_BITS // 2, description="Bits two frame hashes may differ."
    )
    # Most of the shorter video must be found in the other: a shared intro or a static scene is not enough.
    min_match_fraction: float = Field(default=0.8, gt=0, le=1, description="Share of frames that must match.")
    # Very short videos carry too little evidence to be called duplicates by their frames alone.
    min_hashes: int = Field(default=2, ge=1, description="Fewest frame hashes a video needs to be compared.")

    @property
    def version(self) -> str:
        """The annotator version the grouping is recorded under (a function of the thresholds)."""
        return f"h{self.max_hamming}-f{self.min_match_fraction:g}-n{self.min_hashes}"


@dataclass(frozen=True)
class Fingerprint:
    """What grouping knows about one episode."""

    episode_id: int
    vendor: str = ""
    phashes: tuple[int, ...] = ()
    message_digest: str | None = None


@dataclass(frozen=True)
class Group:
    """Near-duplicate episodes; ``group_id`` is stable: ``g<smallest episode id>``."""

    group_id: str
    episode_ids: tuple[int, ...]  # sorted
    reasons: tuple[str, ...] = field(default=())  # "message" and/or "video"


def video_match(a: Sequence[int], b: Sequence[int], params: DedupParams) -> bool:
    """Whether two videos' frame hashes say they show the same footage."""
    if len(a) < params.min_hashes or len(b) < params.min_hashes:
        return False
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    found = sum(1 for h in short if any(hamming(h, g) <= params.max_hamming for g in long_))
    return found >= params.min_match_fraction * len(short)


def _bands(params: DedupParams) -> list[tuple[int, int]]:
    """(shift, mask) of ``max_hamming + 1`` bands covering the 64 bits."""
    n = params.max_hamming + 1
    edges = [round(i * PHASH_BITS / n) for i in range(n + 1)]
    return [(lo, (1 << (hi - lo)) - 1) for lo, hi in itertools.pairwise(edges)]


class _UnionFind:
    def __init__(self, items: Iterable[int]) -> None:
        self.parent = {i: i for i in items}

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:  # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def group_near_duplicates(
    fingerprints: Iterable[Fingerprint], params: DedupParams | None = None
) -> list[Group]:
    """Groups of two or more near-duplicate episodes (episodes without a duplicate are in none)."""
    params = params or DedupParams()
    prints = {f.episode_id: f for f in fingerprints}
    uf = _UnionFind(prints)
    why: dict[tuple[int, int], set[str]] = defaultdict(set)

    by_digest: dict[str, list[int]] = defaultdict(list)
    for f in prints.values():
        if f.message_digest:
            by_digest[f.message_digest].append(f.episode_id)
    for same in by_digest.values():
        for other in same[1:]:
            uf.union(same[0], other)
            why[(min(same[0], other), max(same[0], other))].add("message")

    buckets: dict[tuple[int, int], set[int]] = defaultdict(set)
    bands = _bands(params)
    for f in prints.values():
        if len(f.phashes) < params.min_hashes:
            continue
        for h in f.phashes:
            for band, (shift, mask) in enumerate(bands):
                buckets[(band, (h >> shift) & mask)].add(f.episode_id)
    candidates: set[tuple[int, int]] = set()
    for bucket in buckets.values():
        if len(bucket) > 1:
            ordered = sorted(bucket)
            candidates.update((a, b) for i, a in enumerate(ordered) for b in ordered[i + 1 :])
    for a, b in sorted(candidates):
        if video_match(prints[a].phashes, prints[b].phashes, params):
            uf.union(a, b)
            why[(a, b)].add("video")

    members_of: dict[int, list[int]] = defaultdict(list)
    for episode_id in prints:
        members_of[uf.find(episode_id)].append(episode_id)
    groups = []
    for root, component in sorted(members_of.items()):
        if len(component) < 2:
            continue
        ids: tuple[int, ...] = tuple(sorted(component))
        reasons = sorted({r for (a, b), rs in why.items() if a in ids for r in rs})
        groups.append(Group(group_id=f"g{root}", episode_ids=ids, reasons=tuple(reasons)))
    return groups


def pick_representatives(
    groups: Iterable[Group], scores: Mapping[int, float] | None = None
) -> dict[str, int]:
    """The episode kept per group: the highest score (e.g. a quality score) when given, ties and missing
    scores broken by the smallest episode id (the earliest landed)."""
    given = dict(scores or {})

    def rank(episode_id: int) -> tuple[float, int]:
        score = given.get(episode_id)
        return (-score if score is not None else float("inf"), episode_id)

    return {group.group_id: min(group.episode_ids, key=rank) for group in groups}
