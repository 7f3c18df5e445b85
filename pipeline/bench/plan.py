"""``sluice bench plan``: the batch planner against greedy LPT on heavy-tailed sizes with binding caps.

Inputs (seeded, so every run plans the same batches): ``n`` files with lognormal sizes clipped to
1 MB – 20 GB (median 300 MB), each a recording whose duration follows from a lognormal bitrate (median
1.5 MB/s); its estimated processing cost is duration × resolution factor (480p 0.33 … 4K 9) × codec factor
(H.264 1, H.265 1.8, AV1 3). Cost is therefore not proportional to bytes: per byte it varies about 30×.
Every file may be cut into time ranges.

Caps are set so that they bind: cost per split at most 3% above total cost / k, and files per split at most
3% above pieces / k (pieces = files after the planner cuts the large ones; a chunk is one file for the
catalog). The objective is bytes. As measured, LPT breaks the cost cap in a third to a half of the splits
at k = 64 (the worst by 25–65%) but not the files cap: dealing thousands of small files to the lightest
split is nearly round-robin. The files cap binds the planner instead: moving bytes and cost around fills splits up to
it (``planner_largest_files`` equals ``max_files``).

For each ``n`` and ``k`` the planner (:func:`pipeline.planner.split`, time limit 5 s) and the reference,
plain LPT on the *same pieces* (:func:`pipeline.planner.lpt`, which never looks at the caps), are judged the
same way: imbalance = largest split / max(total / k, largest unsplittable piece), violations = splits that
break a cap, seconds of wall time (CPU seconds beside, because this machine is shared). LPT on the uncut
files is reported beside too: it shows what the largest file alone does to the balance. The headline case
is planned twice and ``planner_deterministic_n10000_k64`` says whether both plans were identical.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from pipeline.errors import UnknownChoiceError
from pipeline.planner import Caps, Item, Piece, Plan, cut, lpt, split
from pipeline.settings import Settings

log = logging.getLogger(__name__)

SIZES: dict[str, tuple[int, ...]] = {"default": (100, 1_000, 10_000, 100_000), "small": (100, 1_000, 10_000)}
KS = (8, 64)
SEED = 20240611
#: "A little above" the mean: 3% over total / k for cost and for files.
CAP_SLACK = 1.03
TIME_LIMIT_S = 5.0
HEADLINE = (10_000, 64)
MIN_BYTES = 1_000_000
MAX_BYTES = 20_000_000_000
# Sizes: median 300 MB, sigma 1.6 puts about 0.5% of files at the 20 GB clip (a heavy tail).
_SIZE_MEDIAN_BYTES = 300e6
_SIZE_SIGMA = 1.6
# Bitrate: median 1.5 MB/s (≈ 12 Mbit/s, a 1080p camera), sigma 0.5.
_BITRATE_MEDIAN_BPS = 1.5e6
_BITRATE_SIGMA = 0.5
_RESOLUTION_FACTORS = ((0.33, 0.2), (1.0, 0.4), (2.25, 0.3), (9.0, 0.1))  # 480p, 720p, 1080p, 4K
_CODEC_FACTORS = ((1.0, 0.6), (1.8, 0.3), (3.0, 0.1))  # H.264, H.265, AV1


def make_items(n: int, seed: int = SEED) -> list[Item]:
    """``n`` seeded files with heavy-tailed sizes and a cost that is not proportional to bytes."""
    rng = np.random.default_rng(seed)
    size = np.clip(rng.lognormal(math.log(_SIZE_MEDIAN_BYTES), _SIZE_SIGMA, n), MIN_BYTES, MAX_BYTES)
    bitrate = rng.lognormal(math.log(_BITRATE_MEDIAN_BPS), _BITRATE_SIGMA, n)
    resolution = rng.choice(
        [f for f, _ in _RESOLUTION_FACTORS], p=[p for _, p in _RESOLUTION_FACTORS], size=n
    )
    codec = rng.choice([f for f, _ in _CODEC_FACTORS], p=[p for _, p in _CODEC_FACTORS], size=n)
    duration = size / bitrate
    cost = duration * resolution * codec
    return [
        Item(f"drop/f{i:06d}.mcap", int(size[i]), float(cost[i]), float(duration[i]), splittable=True)
        for i in range(n)
    ]


def binding_caps(items: list[Item], k: int) -> tuple[Caps, tuple[Piece, ...]]:
    """Caps a little above the means (see the module doc) and the pieces the planner will assign.

    The files cap does not change how items are cut, so cutting under the cost cap alone gives the same
    pieces :func:`pipeline.planner.split` assigns; LPT gets exactly these.
    """
    max_cost = CAP_SLACK * math.fsum(i.cost or 0.0 for i in items) / k
    pieces = cut(items, k, Caps(max_cost=max_cost))
    return Caps(max_files=math.ceil(CAP_SLACK * len(pieces) / k), max_cost=max_cost), pieces


def run(size: str, settings: Settings) -> dict[str, Any]:
    """Run every (n, k) case; ``size`` is ``default`` (n up to 100,000) or ``small`` (up to 10,000)."""
    del settings  # nothing to read or write: the inputs are generated in memory
    if size not in SIZES:
        raise UnknownChoiceError("plan benchmark size", size, SIZES)
    cases: list[dict[str, Any]] = []
    for n in SIZES[size]:
        items = make_items(n)
        for k in KS:
            cases.append(_case(items, k))
    head = next(c for c in cases if (c["n"], c["k"]) == HEADLINE)
    # Same input, same plan: plan the headline case again and compare piece by piece.
    repeat = split(
        make_items(HEADLINE[0]), HEADLINE[1], _caps_of(head), time_limit_s=TIME_LIMIT_S, strict=False
    )
    deterministic = repeat.assignment() == head["_assignment"]
    return {
        "planner_imbalance_n10000_k64": head["planner_imbalance"],
        "planner_violations_n10000_k64": head["planner_violations"],
        "planner_seconds_n10000_k64": head["planner_seconds"],
        "planner_cpu_seconds_n10000_k64": head["planner_cpu_seconds"],
        "lpt_imbalance_n10000_k64": head["lpt_imbalance"],
        "lpt_violations_n10000_k64": head["lpt_violations"],
        "planner_deterministic_n10000_k64": deterministic,
        "time_limit_s": TIME_LIMIT_S,
        "cap_slack": CAP_SLACK,
        "seed": SEED,
        "cases": [{key: v for key, v in c.items() if not key.startswith("_")} for c in cases],
    }


def _case(items: list[Item], k: int) -> dict[str, Any]:
    n = len(items)
    caps, pieces = binding_caps(items, k)
    wall, cpu = time.monotonic(), time.process_time()
    plan = split(items, k, caps, time_limit_s=TIME_LIMIT_S, strict=False)
    planner_s, planner_cpu_s = time.monotonic() - wall, time.process_time() - cpu
    wall = time.monotonic()
    reference = lpt(pieces, k, caps)
    lpt_s = time.monotonic() - wall
    uncut = lpt(items, k)
    case = {
        "n": n,
        "k": k,
        "pieces": len(pieces),
        "chunks": sum(1 for p in pieces if not p.is_whole),
        "max_files": caps.max_files,
        "max_cost": caps.max_cost,
        **_figures("planner", plan, planner_s),
        "planner_cpu_seconds": round(planner_cpu_s, 4),
        "planner_method": plan.method,
        "planner_stopped_by": plan.stopped_by,
        "planner_solver_rounds": plan.solver_rounds,
        "heuristic_imbalance": round(plan.heuristic_imbalance, 6),
        "heuristic_violations": plan.heuristic_violations,
        **_figures("lpt", reference, lpt_s),
        "lpt_uncut_imbalance": round(uncut.imbalance, 6),
        "_assignment": plan.assignment(),
    }
    log.info(
        "n=%d k=%d: planner %.5f / %d violations / %.2f s (%s), LPT %.5f / %d violations",
        n,
        k,
        plan.imbalance,
        plan.violating_splits,
        planner_s,
        plan.method,
        reference.imbalance,
        reference.violating_splits,
    )
    return case


def _figures(prefix: str, plan: Plan, seconds: float) -> dict[str, Any]:
    return {
        f"{prefix}_imbalance": round(plan.imbalance, 6),
        f"{prefix}_violations": plan.violating_splits,
        f"{prefix}_seconds": round(seconds, 4),
        f"{prefix}_largest_files": max(s.n_files for s in plan.splits),
        f"{prefix}_largest_cost_over_cap": round(
            max(s.cost for s in plan.splits) / (plan.caps.max_cost or 1.0), 6
        ),
    }


def _caps_of(case: dict[str, Any]) -> Caps:
    return Caps(max_files=case["max_files"], max_cost=case["max_cost"])
