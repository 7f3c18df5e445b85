"""Group near-duplicate episodes from their fingerprints (pure logic, no database).

Two episodes are near-duplicates when

* their message fingerprints are equal (the same recording re-chunked, recompressed or with re-encoded
  cameras: the non-camera message bytes did not change), or
* their videos match: at least ``min_match_fraction`` of the shorter one's frame hashes have a hash in the
  other within ``max_hamming`` bits (the same footage re-encoded, rescaled or cut differently).

Candidate video pairs come from an exact Hamming range search over the frame hashes
(:mod:`.search`), queried with only a few hashes per episode. Why that misses no matching pair: if the
shorter video ``a`` (``n`` hashes) matches ``b``, at least ``need = ceil(min_match_fraction * n)`` of its
hashes have a hash of ``b`` within ``max_hamming`` bits, so at most ``n - need`` do not, and any
``n - need + 1`` of them hold at least one that does. Each episode queries with its first ``n - need + 1``
hashes (2 of 8 at the default 0.8) against every indexed hash; the range search returns every hash within
``max_hamming`` of a query, so ``b`` is a candidate of ``a``. Candidates are then checked exactly
(:func:`video_match`). Unrelated episodes share no hash within ``max_hamming`` bits (for hashes of random
bits the chance is 2.4e-10 per pair of hashes), so they are never compared: the work grows with the
number of hashes, not with the number of episode pairs.

Matches are joined by union-find: groups are the connected components, so A~B and B~C put A, B and C in
one group.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
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


def query_count(n_hashes: int, params: DedupParams) -> int:
    """How many of a video's ``n_hashes`` hashes must be queried so that no match is missed (module doc)."""
    return n_hashes - math.ceil(params.min_match_fraction * n_hashes) + 1


@dataclass(frozen=True)
class PairSearch:
    """What the candidate search found: the pairs it compared and those whose videos match."""

    compared: int
    video_pairs: list[tuple[int, int]]


def video_pairs(prints: Sequence[Fingerprint], params: DedupParams) -> PairSearch:
    """Episode pairs ``(a, b)``, ``a < b``, whose videos match (module doc: candidates, then exact checks)."""
    from pipeline.dedup.search import HashIndex

    videos = [f for f in prints if len(f.phashes) >= params.min_hashes]
    if len(videos) < 2:
        return PairSearch(0, [])
    lengths = np.asarray([len(f.phashes) for f in videos], dtype=np.int64)
    codes = np.fromiter((h for f in videos for h in f.phashes), dtype=np.uint64, count=int(lengths.sum()))
    owner = np.repeat(np.arange(len(videos)), lengths)
    first = np.cumsum(lengths) - lengths
    queried = np.asarray([query_count(int(n), params) for n in lengths], dtype=np.int64)
    query_pos = np.repeat(first, queried) + (
        np.arange(int(queried.sum())) - np.repeat(np.cumsum(queried) - queried, queried)
    )
    q, i = HashIndex(codes, params.max_hamming).near_pairs(codes[query_pos])
    a, b = owner[query_pos[q]], owner[i]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keys = np.unique(lo[lo != hi] * len(videos) + hi[lo != hi])
    matched = []
    for key in keys.tolist():
        x, y = divmod(key, len(videos))
        if _match_arrays(
            codes[first[x] : first[x] + lengths[x]], codes[first[y] : first[y] + lengths[y]], params
        ):
            ex, ey = videos[x].episode_id, videos[y].episode_id
            matched.append((min(ex, ey), max(ex, ey)))
    return PairSearch(len(keys), sorted(matched))


def _match_arrays(a: np.ndarray, b: np.ndarray, params: DedupParams) -> bool:
    """:func:`video_match` on arrays of hashes (one comparison of every hash of ``a`` with every one of ``b``)."""
    close = np.bitwise_count(a[:, None] ^ b[None, :]) <= params.max_hamming
    found = int(close.any(axis=1).sum()) if len(a) <= len(b) else int(close.any(axis=0).sum())
    return found >= params.min_match_fraction * min(len(a), len(b))


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
    return find_groups(fingerprints, params).groups


@dataclass(frozen=True)
class Grouping:
    """Groups, and how many episode pairs the candidate search had compared to find them."""

    groups: list[Group]
    compared: int


def find_groups(fingerprints: Iterable[Fingerprint], params: DedupParams | None = None) -> Grouping:
    """:func:`group_near_duplicates` with the candidate search's count of compared pairs."""
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

    search = video_pairs(list(prints.values()), params)
    for a, b in search.video_pairs:
        uf.union(a, b)
        why[(a, b)].add("video")

    members_of: dict[int, list[int]] = defaultdict(list)
    for episode_id in prints:
        members_of[uf.find(episode_id)].append(episode_id)
    reasons_of: dict[int, set[str]] = defaultdict(set)
    for (a, _), reasons in why.items():
        reasons_of[uf.find(a)] |= reasons
    groups = [
        Group(
            group_id=f"g{root}", episode_ids=tuple(sorted(component)), reasons=tuple(sorted(reasons_of[root]))
        )
        for root, component in sorted(members_of.items())
        if len(component) > 1
    ]
    return Grouping(groups, search.compared)


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
