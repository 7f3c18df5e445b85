"""CP-SAT polishing and repair by large-neighbourhood search over small groups of splits.

A plain n × k boolean assignment model is 640,000 variables at n = 10,000, k = 64 and does not improve on
its warm start within seconds (measured while building this: 4 splits × 625 pieces took ≈ 1.2 s per solve,
8 or 16 splits found nothing better in 5 s). Two splits, though, make a two-way partition with side
constraints that CP-SAT solves to optimality in ≈ 0.05 s for ≈ 300 pieces. So the search repeats:

* if a split breaks a cap: group it with splits that have the most room in that cap and minimise the excess
  (without letting any of them exceed the current largest load);
* otherwise: group the heaviest split with light ones and minimise the largest load of the group;

keeping a change only if it is strictly better. Groups are pairs first (heaviest with lightest, then the
next lightest, ...); when every pair with the heaviest split has been tried without progress, triples of it
and two of the lightest splits. The search ends when the largest split is within ``tolerance`` of the lower
bound, every group has been tried (a local optimum), or a budget runs out. Pieces outside the group stay
where they are; when a group holds more than ``max_free`` pieces a seeded sample of them is freed.

Determinism: one worker, a seed per round drawn from a seeded generator, and a budget counted in CP-SAT's
deterministic time, so the same input gives the same plan. Only when the wall-clock limit ends the search
first (``stopped_by == "time_limit"``) can the result depend on the machine's speed.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

# Imported here, not per solve: OR-tools pulls in pandas, which costs seconds on a cold start and must not
# eat the planner's time limit.
from ortools.sat.python import cp_model

from pipeline.planner.arrays import Arrays

#: Objective resolution inside the model: one unit is 1 ppm of the lower bound, far below the 1% target.
OBJECTIVE_UNITS = 1_000_000
#: Cap one group's solve at this much deterministic time (≈ 2 s of wall time here); a pair of ≈ 600 pieces
#: is usually proved optimal in a twentieth of that.
GROUP_WORK_LIMIT = 0.5
#: Triples join the heaviest split with two of: the 4 lightest splits and the 3 with the most room under
#: each cap (≤ 10 partners, ≤ 45 triples). Lightest-only triples left n = 100, k = 64 stuck at 1.085 (pieces
#: then up to a whole share); adding the roomy splits got it to 1.044 with the same budget.
LIGHT_FOR_TRIPLES = 4
ROOMY_PER_CAP = 3
#: A sampled group (more than max_free pieces) may do better with another sample: this many tries each.
SAMPLED_TRIES = 3


@dataclass(frozen=True)
class SearchResult:
    assignment: np.ndarray
    rounds: int
    improvements: int
    stopped_by: str
    work_used: float


def improve(
    arrays: Arrays,
    assignment: np.ndarray,
    *,
    lower_bound: float,
    deadline: float,
    work_limit: float,
    tolerance: float,
    seed: int,
    max_free: int,
) -> SearchResult:
    """Improve ``assignment``: repair cap excess first, then balance, until a stop condition (module doc)."""
    rng = random.Random(seed)
    a = assignment.copy()
    obj, req = arrays.loads(a)
    tries: dict[tuple[int, ...], int] = {}
    rounds = improvements = 0
    work_used = 0.0
    while True:
        over = _relative_excess(arrays, req)
        repair = bool(over.max(initial=0.0) > 0)
        if not repair and obj.max() <= lower_bound * (1 + tolerance):
            stopped_by = "tolerance"
            break
        if time.monotonic() >= deadline:
            stopped_by = "time_limit"
            break
        if work_used >= work_limit:
            stopped_by = "work_limit"
            break
        group = _next_group(arrays, a, obj, req, over, repair, tries, max_free)
        if group is None:
            stopped_by = "local_optimum"
            break
        tries[group] = tries.get(group, 0) + 1
        rounds += 1
        members = np.flatnonzero(np.isin(a, group))
        if len(members) > max_free:
            members = np.sort(np.array(rng.sample(members.tolist(), max_free), dtype=np.int64))
        placed, used = _solve_group(
            arrays,
            a,
            obj,
            req,
            members,
            group,
            repair=repair,
            lower_bound=lower_bound,
            work=min(GROUP_WORK_LIMIT, work_limit - work_used),
            wall_s=max(deadline - time.monotonic(), 0.01),
            seed=rng.randrange(1 << 30),
        )
        work_used += used
        if placed is None:
            continue
        candidate = a.copy()
        candidate[members] = placed
        new_obj, new_req = arrays.loads(candidate)
        if _better(arrays, (new_obj, new_req), (obj, req), group, lower_bound):
            a, obj, req = candidate, new_obj, new_req
            improvements += 1
            tries.clear()
    return SearchResult(a, rounds, improvements, stopped_by, work_used)


def _relative_excess(arrays: Arrays, req: np.ndarray) -> np.ndarray:
    """Per split, the largest relative excess over any cap (0 when within all of them)."""
    if not len(arrays.cap):
        return np.zeros(arrays.k)
    return (np.maximum(req - arrays.cap, 0) / arrays.cap).max(axis=1)


def _next_group(
    arrays: Arrays,
    a: np.ndarray,
    obj: np.ndarray,
    req: np.ndarray,
    over: np.ndarray,
    repair: bool,
    tries: dict[tuple[int, ...], int],
    max_free: int,
) -> tuple[int, ...] | None:
    """The first group, in order of promise, that has not used up its tries; None at a local optimum."""
    if repair:
        first = int(np.argmax(over))
        r = int(np.argmax((req[first] - arrays.cap) / arrays.cap))
        # Partners with the most room in the broken cap first, then the lightest.
        partners = [int(j) for j in np.lexsort((obj, req[:, r] / arrays.cap[r])) if j != first]
    else:
        first = int(np.argmax(obj))
        partners = [int(j) for j in np.argsort(obj, kind="stable") if j != first]
    # Triples also draw on the splits with the most room under each cap: when the lightest splits are full
    # in files or cost, bytes can only move through a split that has room.
    roomy = [
        int(j) for r in range(len(arrays.cap)) for j in np.argsort(req[:, r], kind="stable")[:ROOMY_PER_CAP]
    ]
    triple_partners = list(dict.fromkeys(j for j in partners[:LIGHT_FOR_TRIPLES] + roomy if j != first))
    counts = np.bincount(a, minlength=arrays.k)
    for group in _groups(first, partners, triple_partners):
        allowed = SAMPLED_TRIES if int(counts[list(group)].sum()) > max_free else 1
        if tries.get(group, 0) < allowed:
            return group
    return None


def _groups(first: int, partners: list[int], triple_partners: list[int]) -> Iterator[tuple[int, ...]]:
    for j in partners:
        yield tuple(sorted((first, j)))
    for j, other in itertools.combinations(triple_partners, 2):
        yield tuple(sorted((first, j, other)))


def _better(
    arrays: Arrays,
    new: tuple[np.ndarray, np.ndarray],
    old: tuple[np.ndarray, np.ndarray],
    group: tuple[int, ...],
    lower_bound: float,
) -> bool:
    """Less cap excess wins; at equal excess, a lower largest load within the group (beyond float noise)."""
    new_excess, old_excess = arrays.excess(new[1]), arrays.excess(old[1])
    noise = 1e-12
    if new_excess < old_excess - noise:
        return True
    if new_excess > old_excess + noise:
        return False
    idx = list(group)
    return bool(new[0][idx].max() < old[0][idx].max() - lower_bound * 1e-9)


def _solve_group(
    arrays: Arrays,
    a: np.ndarray,
    obj: np.ndarray,
    req: np.ndarray,
    members: np.ndarray,
    group: tuple[int, ...],
    *,
    repair: bool,
    lower_bound: float,
    work: float,
    wall_s: float,
    seed: int,
) -> tuple[np.ndarray | None, float]:
    """Re-assign ``members`` among the splits of ``group``; return their new splits and the work used."""
    unit = lower_bound / OBJECTIVE_UNITS if lower_bound > 0 else 1.0
    current = a[members]
    weights = arrays.weight[members]
    w_int = np.rint(weights / unit).astype(np.int64).tolist()
    model = cp_model.CpModel()
    # x[c][i]: piece i goes to split group[c]. A pair needs one boolean per piece (the other is its
    # negation), which halves the model where most of the search happens.
    x: list[list[Any]]
    if len(group) == 2:
        first = [model.new_bool_var(f"x{i}") for i in range(len(members))]
        x = [first, [v.Not() for v in first]]
    else:
        x = [[model.new_bool_var(f"x{c}_{i}") for i in range(len(members))] for c in range(len(group))]
        for i in range(len(members)):
            model.add_exactly_one([x[c][i] for c in range(len(group))])
    for c, j in enumerate(group):
        for var, hint in zip(x[c], (current == j).tolist(), strict=True):
            if len(group) > 2 or c == 0:
                model.add_hint(var, hint)
    largest = model.new_int_var(0, sum(w_int) + round(obj[list(group)].max() / unit), "largest")
    penalties: list[tuple[cp_model.IntVar, int]] = []
    for c, j in enumerate(group):
        mine = current == j
        fixed = round((obj[j] - float(weights[mine].sum())) / unit)
        model.add(fixed + cp_model.LinearExpr.weighted_sum(x[c], w_int) <= largest)
        for r in range(arrays.req.shape[1]):
            col = arrays.req[members, r]
            rest = int(req[j, r] - col[mine].sum())
            cap = int(arrays.cap[r])
            load = rest + cp_model.LinearExpr.weighted_sum(x[c], col.tolist())
            if repair:
                slack = model.new_int_var(0, max(0, rest + int(col.sum()) - cap), f"over{c}_{r}")
                model.add(load <= cap + slack)
                # Excess counted relative to the cap, so a file over max_files and a cost unit over
                # max_cost weigh what they mean: about a millionth of the cap per unit of penalty.
                penalties.append((slack, max(1, round(OBJECTIVE_UNITS / cap))))
            else:
                model.add(load <= cap)
    if repair:
        # Repairing a cap must not make the largest split worse; rounding to units can move the hint's
        # loads by half a unit per piece, hence the allowance.
        ceiling = math.ceil(max(obj.max(), lower_bound) / unit) + len(members)
        model.add(largest <= ceiling)
        model.minimize(cp_model.LinearExpr.weighted_sum([p for p, _ in penalties], [w for _, w in penalties]))
    else:
        model.minimize(largest)

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.max_deterministic_time = max(work, 1e-3)
    solver.parameters.max_time_in_seconds = wall_s
    status = solver.solve(model)
    used = float(solver.deterministic_time)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, used
    placed = np.empty(len(members), dtype=np.int64)
    for c, j in enumerate(group):
        chosen = np.array([solver.boolean_value(v) for v in x[c]], dtype=bool)
        placed[chosen] = j
    return placed, used
