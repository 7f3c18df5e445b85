"""``sluice bench dedup``: near-duplicate grouping of 100,000 episodes against a brute-force Hamming search.

Inputs (seeded): ``n`` episodes of :data:`HASHES_PER_EPISODE` 64-bit frame hashes each (an 8 s video at the
``video_phash`` default of one hash a second), the bits of unrelated episodes drawn at random. For
:data:`PLANTED_FRACTION` of them a copy is added, as a re-encode would make it: every hash moved by the
same number of bits, drawn from :data:`PLANTED_DISTANCES` (up to 8, the default ``max_hamming``, so they
must group; 10 and more, so they must not), and half of the copies cut by a frame (7 of 8 hashes kept).

Measured, in one run on the same fingerprints:

* **ours**: :func:`pipeline.dedup.find_groups` with the default :class:`~pipeline.dedup.DedupParams`:
  ``dedup_seconds_n<n>`` of wall time and ``dedup_candidates_per_episode`` (episode pairs compared exactly,
  per episode);
* **brute force**: every hash of a sampled episode against every hash of every episode (vectorized XOR
  and popcount), then the same match rule. Comparing all pairs is quadratic (hours at 100,000), so it runs
  for :data:`BRUTE_FORCE_QUERIES` sampled episodes (every planted original first, then random ones), and
  ``dedup_recall`` is the share of the pairs it finds for them that ours found too;
  ``bruteforce_seconds_extrapolated`` is its per-episode time times ``n / 2``.
* ``planted_recall`` (copies within ``max_hamming`` grouped with their original) and
  ``planted_false_groupings`` (copies farther away grouped anyway) from the planted labels.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from pipeline.dedup import DedupParams, Fingerprint, find_groups
from pipeline.errors import UnknownChoiceError
from pipeline.settings import Settings

log = logging.getLogger(__name__)

SIZES = {"small": 10_000, "default": 100_000, "large": 1_000_000}
SEED = 20240917
HASHES_PER_EPISODE = 8
#: 2% of episodes get a copy: 2,000 near-duplicate pairs at 100,000.
PLANTED_FRACTION = 0.02
#: Bits each hash of a copy moves: 0-8 must group at max_hamming 8, 10-16 must not.
PLANTED_DISTANCES = (0, 1, 2, 4, 6, 8, 10, 12, 16)
#: Sampled episodes the brute force runs for (large: fewer, each scans 10x the hashes).
BRUTE_FORCE_QUERIES = {"small": 1_000, "default": 1_000, "large": 200}


def run(size: str, settings: Settings) -> dict[str, Any]:
    """Group ``SIZES[size]`` episodes' hashes and check them against brute force (see the module doc)."""
    del settings  # nothing to read or write: the inputs are generated in memory
    if size not in SIZES:
        raise UnknownChoiceError("dedup benchmark size", size, SIZES)
    n = SIZES[size]
    params = DedupParams()
    prints, planted = make_fingerprints(n)
    wall, cpu = time.monotonic(), time.process_time()
    grouping = find_groups(prints, params)
    seconds, cpu_seconds = time.monotonic() - wall, time.process_time() - cpu
    group_of = {e: g.group_id for g in grouping.groups for e in g.episode_ids}

    def grouped(a: int, b: int) -> bool:
        return a in group_of and group_of.get(a) == group_of.get(b)

    queries = _sample_queries(prints, planted, BRUTE_FORCE_QUERIES[size])
    started = time.monotonic()
    truth = brute_force_pairs(prints, queries, params)
    brute_s = time.monotonic() - started
    found = sum(grouped(a, b) for a, b in truth)
    must = [(a, b) for a, b, d in planted if d <= params.max_hamming]
    must_not = [(a, b) for a, b, d in planted if d > params.max_hamming]
    n_episodes = len(prints)
    results: dict[str, Any] = {
        "dedup_recall": found / len(truth) if truth else 1.0,
        f"dedup_seconds_n{n}": round(seconds, 3),
        f"dedup_cpu_seconds_n{n}": round(cpu_seconds, 3),
        "dedup_candidates_per_episode": grouping.compared / n_episodes,
        "pairs_compared": grouping.compared,
        "groups": len(grouping.groups),
        "planted_recall": sum(grouped(a, b) for a, b in must) / len(must),
        "planted_false_groupings": sum(grouped(a, b) for a, b in must_not),
        "bruteforce_queries": len(queries),
        "bruteforce_pairs_found": len(truth),
        "bruteforce_seconds_sampled": round(brute_s, 3),
        "bruteforce_seconds_extrapolated": round(brute_s / len(queries) * n_episodes / 2, 1),
        "episodes": n_episodes,
        "hashes_per_episode": HASHES_PER_EPISODE,
        "planted_pairs": len(planted),
        "max_hamming": params.max_hamming,
        "min_match_fraction": params.min_match_fraction,
        "seed": SEED,
    }
    results["speedup_vs_bruteforce"] = round(
        results["bruteforce_seconds_extrapolated"] / max(seconds, 1e-9), 1
    )
    log.info("dedup bench: %s", {k: v for k, v in results.items() if isinstance(v, int | float)})
    return results


def make_fingerprints(n: int, seed: int = SEED) -> tuple[list[Fingerprint], list[tuple[int, int, int]]]:
    """``n`` unrelated episodes plus their planted copies; returns (fingerprints, (original, copy, bits))."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 2**64, size=(n, HASHES_PER_EPISODE), dtype=np.uint64)
    prints = [Fingerprint(e, phashes=tuple(row)) for e, row in enumerate(codes.tolist())]
    originals = rng.choice(n, size=int(n * PLANTED_FRACTION), replace=False)
    planted = []
    for k, original in enumerate(originals.tolist()):
        bits = int(PLANTED_DISTANCES[k % len(PLANTED_DISTANCES)])
        kept = HASHES_PER_EPISODE - (k // len(PLANTED_DISTANCES)) % 2  # every other round a frame shorter
        start = int(rng.integers(0, HASHES_PER_EPISODE - kept + 1))
        copy = []
        for h in codes[original, start : start + kept].tolist():
            flip = rng.choice(64, size=bits, replace=False) if bits else ()
            copy.append(h ^ sum(1 << int(b) for b in flip))
        prints.append(Fingerprint(n + k, phashes=tuple(copy)))
        planted.append((original, n + k, bits))
    return prints, planted


def brute_force_pairs(
    prints: list[Fingerprint], queries: list[int], params: DedupParams
) -> set[tuple[int, int]]:
    """Every matching pair of each queried episode (by position in ``prints``), scanning all hashes."""
    lengths = np.asarray([len(f.phashes) for f in prints], dtype=np.int64)
    codes = np.fromiter((h for f in prints for h in f.phashes), dtype=np.uint64, count=int(lengths.sum()))
    first = np.cumsum(lengths) - lengths
    pairs = set()
    for q in queries:
        mine = np.asarray(prints[q].phashes, dtype=np.uint64)
        close = np.bitwise_count(mine[:, None] ^ codes[None, :]) <= params.max_hamming
        # mine found in each episode, and each episode's hashes found in mine
        mine_found = np.logical_or.reduceat(close, first, axis=1).sum(axis=0)
        theirs_found = np.add.reduceat(close.any(axis=0), first)
        short = np.minimum(lengths, len(mine))
        found = np.where(len(mine) <= lengths, mine_found, theirs_found)
        match = (found >= params.min_match_fraction * short) & (short >= params.min_hashes)
        match &= lengths >= params.min_hashes
        match[q] = False
        for other in np.nonzero(match)[0].tolist():
            a, b = prints[q].episode_id, prints[other].episode_id
            pairs.add((min(a, b), max(a, b)))
    return pairs


def _sample_queries(prints: list[Fingerprint], planted: list[tuple[int, int, int]], count: int) -> list[int]:
    rng = np.random.default_rng(SEED + 1)
    chosen = list(dict.fromkeys(a for a, _, _ in planted))[: count // 2]
    rest = rng.choice(len(prints), size=count, replace=False).tolist()
    return list(dict.fromkeys(chosen + rest))[:count]
