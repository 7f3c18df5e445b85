"""Start offsets so that identical steps of different batches (and vendors' runs) do not finish together.

Batches of one plan carry about the same bytes, so started together their steps finish together: the
scheduler and the catalog see a burst of completions and writes, then silence. Spreading the starts over at
least one step's expected duration interleaves the completions instead. Offsets ``i × span / n`` (not
``/ (n - 1)``) matter: with equal step durations ``D`` and ``span = D``, step ``s`` of batch ``i`` finishes at
``s·D + i·D/n``, so every completion of every step lands on its own ``D/n`` slot; with ``n - 1`` the last
batch's step would finish together with the first batch's next step.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from pipeline.planner.model import PlanInputError

log = logging.getLogger(__name__)

#: Completions closer than a second land in the same second of the scheduler's metrics and the catalog's
#: write bursts: keep at least this much between consecutive starts by default.
DEFAULT_MIN_GAP_S = 1.0


def stagger(
    n_batches: int,
    step_duration_s: float,
    *,
    min_gap_s: float = DEFAULT_MIN_GAP_S,
    span_s: float | None = None,
) -> tuple[float, ...]:
    """Start offsets in seconds, one per batch, evenly spread over ``span``.

    ``span = max(step_duration_s, n_batches × min_gap_s, span_s or 0)``: at least one expected step
    duration, and wide enough that consecutive starts are ``min_gap_s`` apart. Offsets are rounded to
    milliseconds; the first is 0. Deterministic.
    """
    if isinstance(n_batches, bool) or not isinstance(n_batches, int) or n_batches < 0:
        raise PlanInputError(f"n_batches={n_batches!r}; allowed: an int >= 0")
    for name, value in (("step_duration_s", step_duration_s), ("min_gap_s", min_gap_s)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise PlanInputError(f"{name}={value!r}; allowed: a finite number >= 0")
    if span_s is not None and not (math.isfinite(span_s) and span_s >= 0):
        raise PlanInputError(f"span_s={span_s!r}; allowed: a finite number >= 0 or None")
    span = max(float(step_duration_s), n_batches * float(min_gap_s), float(span_s or 0.0))
    if n_batches == 0:
        return ()
    gap = span / n_batches
    return tuple(round(i * gap, 3) for i in range(n_batches))


def stagger_vendors(
    vendors: Sequence[str],
    period_s: float,
    *,
    granularity_s: float = 60.0,
) -> dict[str, float]:
    """Offsets (seconds into each schedule period) that spread vendors' runs evenly over the period.

    Vendors are placed in sorted-name order, ``period_s / n`` apart, each offset rounded down to
    ``granularity_s`` (a cron schedule has minutes). Deterministic: the same vendor names give the same
    offsets, whatever order they are passed in. When there are more vendors than ``period_s /
    granularity_s`` slots, some share a slot (logged as a warning).
    """
    if not (isinstance(period_s, int | float) and math.isfinite(period_s) and period_s > 0):
        raise PlanInputError(f"period_s={period_s!r}; allowed: a finite number > 0")
    if not (
        isinstance(granularity_s, int | float)
        and math.isfinite(granularity_s)
        and 0 < granularity_s <= period_s
    ):
        raise PlanInputError(
            f"granularity_s={granularity_s!r}; allowed: a number in (0, period_s={period_s:g}]"
        )
    names = sorted(set(vendors))
    if len(names) != len(vendors):
        raise PlanInputError(f"vendor names repeat in {list(vendors)!r}; allowed: unique names")
    if not names:
        return {}
    slots = math.floor(period_s / granularity_s)
    if len(names) > slots:
        log.warning(
            "%d vendors share %d start slots of %g s: some start together", len(names), slots, granularity_s
        )
    gap = period_s / len(names)
    return {name: math.floor(i * gap / granularity_s) * granularity_s for i, name in enumerate(names)}
