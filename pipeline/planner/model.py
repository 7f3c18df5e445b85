"""The planner's inputs and outputs: small frozen value objects, validated on construction.

An :class:`Item` is one input file; a :class:`Piece` is what the planner actually assigns: either a whole
item or a time-range chunk of one (``[start, end)`` as an exact fraction of the item, plus seconds when the
item's duration is known). A :class:`Plan` holds ``k`` :class:`Split` objects and the figures that judge it
(imbalance against its lower bound, cap violations, which method won).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Integral
from typing import Literal

from pipeline.errors import ConfigError, SluiceError

Objective = Literal["bytes", "cost"]
OBJECTIVES: tuple[Objective, ...] = ("bytes", "cost")

CapName = Literal["max_files", "max_bytes", "max_cost"]


class PlannerError(SluiceError, ValueError):
    """The planner cannot work with what it was given."""


class PlanInputError(PlannerError):
    """An item (or the set of items) is malformed: names the item, the field and what was allowed."""


class CapInfeasibleError(PlannerError):
    """No plan keeps every split within a cap. ``cap`` names the cap (``max_files``, ...)."""

    def __init__(self, cap: str, limit: float, detail: str) -> None:
        self.cap = cap
        self.limit = limit
        super().__init__(f"cap {cap}={limit:g} cannot be met: {detail}")


@dataclass(frozen=True, slots=True)
class Item:
    """One input file to plan.

    ``cost`` is the estimated processing cost (e.g. duration × pixels × codec factor) in any unit, needed
    when the objective is cost or a cost cap is set. ``splittable`` says whether the step may process the
    item as independent time-range chunks; ``duration_s`` (optional) lets chunk ids carry seconds.
    """

    id: str
    size_bytes: int
    cost: float | None = None
    duration_s: float | None = None
    splittable: bool = False

    def __post_init__(self) -> None:
        if not self.id:
            raise PlanInputError("item id must be a non-empty string")
        if (
            isinstance(self.size_bytes, bool)
            or not isinstance(self.size_bytes, Integral)
            or self.size_bytes < 0
        ):
            raise PlanInputError(f"item {self.id!r}: size_bytes={self.size_bytes!r}; allowed: an int >= 0")
        object.__setattr__(self, "size_bytes", int(self.size_bytes))  # numpy integers become plain ints
        if self.cost is not None and not (math.isfinite(self.cost) and self.cost >= 0):
            raise PlanInputError(f"item {self.id!r}: cost={self.cost!r}; allowed: a finite number >= 0")
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise PlanInputError(f"item {self.id!r}: duration_s={self.duration_s!r}; allowed: a number > 0")


@dataclass(frozen=True, slots=True)
class Caps:
    """Per-split caps; ``None`` means uncapped.

    ``max_files`` protects the catalog's write capacity (rows per batch), ``max_bytes`` the local scratch
    storage a batch lands on, ``max_cost`` the compute one batch may take (so it finishes in its window).
    A time-range chunk counts as one file.
    """

    max_files: int | None = None
    max_bytes: int | None = None
    max_cost: float | None = None

    def __post_init__(self) -> None:
        problems: list[tuple[str, str]] = []
        for name in ("max_files", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                problems.append((name, f"got {value!r}; allowed: an int >= 1 or None"))
        if self.max_cost is not None and not (math.isfinite(self.max_cost) and self.max_cost > 0):
            problems.append(("max_cost", f"got {self.max_cost!r}; allowed: a number > 0 or None"))
        if problems:
            raise ConfigError("planner caps", problems)


_ZERO = Fraction(0)
_ONE = Fraction(1)


@dataclass(frozen=True, slots=True)
class Piece:
    """A whole item or a time-range chunk ``[start_fraction, end_fraction)`` of it.

    Fractions are exact (:class:`fractions.Fraction`), so the chunks of one item cover ``[0, 1)`` exactly
    once; bytes are the item's bytes floored at both boundaries, so the chunks' bytes sum to the item's
    whatever way it was cut (and re-cut). Cost is shared in proportion to the time range.
    """

    item_id: str
    item_size_bytes: int
    item_cost: float | None
    splittable: bool
    duration_s: float | None = None
    start_fraction: Fraction = _ZERO
    end_fraction: Fraction = _ONE
    size_bytes: int = field(init=False)
    cost: float | None = field(init=False)
    id: str = field(init=False)

    def __post_init__(self) -> None:
        if not (0 <= self.start_fraction < self.end_fraction <= 1):
            raise PlanInputError(
                f"piece of {self.item_id!r}: range [{self.start_fraction}, {self.end_fraction}); "
                "allowed: 0 <= start < end <= 1"
            )
        whole = self.start_fraction == 0 and self.end_fraction == 1
        if whole:
            size, cost = self.item_size_bytes, self.item_cost
        else:
            size = math.floor(self.item_size_bytes * self.end_fraction) - math.floor(
                self.item_size_bytes * self.start_fraction
            )
            span = self.end_fraction - self.start_fraction
            cost = None if self.item_cost is None else self.item_cost * float(span)
        object.__setattr__(self, "size_bytes", size)
        object.__setattr__(self, "cost", cost)
        object.__setattr__(self, "id", self._make_id(whole))

    @property
    def is_whole(self) -> bool:
        return self.start_fraction == 0 and self.end_fraction == 1

    @property
    def start_s(self) -> float | None:
        """Start of the chunk in seconds from the item's start, when the item's duration is known."""
        return None if self.duration_s is None else float(self.start_fraction * Fraction(self.duration_s))

    @property
    def end_s(self) -> float | None:
        return None if self.duration_s is None else float(self.end_fraction * Fraction(self.duration_s))

    def _make_id(self, whole: bool) -> str:
        if whole:
            return self.item_id
        if self.duration_s is not None:
            return f"{self.item_id}[{self.start_s:.3f}s,{self.end_s:.3f}s)"
        return f"{self.item_id}[{float(self.start_fraction):.6g},{float(self.end_fraction):.6g})"

    @classmethod
    def whole(cls, item: Item) -> Piece:
        return cls(item.id, item.size_bytes, item.cost, item.splittable, item.duration_s)

    def cut(self, parts: int) -> tuple[Piece, ...]:
        """This piece as ``parts`` equal time ranges."""
        if parts <= 1:
            return (self,)
        if not self.splittable:
            raise PlanInputError(
                f"item {self.item_id!r} is not splittable; cannot cut it into {parts} chunks"
            )
        span = self.end_fraction - self.start_fraction
        bounds = [self.start_fraction + span * Fraction(i, parts) for i in range(parts + 1)]
        return tuple(
            Piece(self.item_id, self.item_size_bytes, self.item_cost, True, self.duration_s, lo, hi)
            for lo, hi in itertools.pairwise(bounds)
        )


@dataclass(frozen=True, slots=True)
class Split:
    """One batch: its pieces and their totals."""

    index: int
    pieces: tuple[Piece, ...]
    size_bytes: int
    cost: float
    n_files: int

    @classmethod
    def of(cls, index: int, pieces: tuple[Piece, ...]) -> Split:
        return cls(
            index,
            pieces,
            sum(p.size_bytes for p in pieces),
            math.fsum(p.cost or 0.0 for p in pieces),
            len(pieces),
        )

    def load(self, objective: Objective) -> float:
        return float(self.size_bytes) if objective == "bytes" else self.cost


@dataclass(frozen=True, slots=True)
class Violation:
    """A split that breaks a cap."""

    split: int
    cap: CapName
    value: float
    limit: float

    def __str__(self) -> str:
        return (
            f"split {self.split}: {self.cap.removeprefix('max_')} {self.value:g} > {self.cap}={self.limit:g}"
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """The splits and how good they are.

    ``imbalance`` = largest split / ``lower_bound`` where ``lower_bound`` = max(total / k, largest
    unsplittable item), in the objective's unit; 1.0 is optimal. ``method`` names what produced the kept
    assignment (``lpt``, ``greedy`` or ``cp-sat``); ``heuristic_imbalance`` is the best heuristic's figure
    before the solver ran, so the solver's gain is visible. ``stopped_by`` says why the search ended:
    ``tolerance``, ``local_optimum``, ``work_limit`` (deterministic) or ``time_limit`` (wall clock: the
    result may then depend on machine speed), or ``not_run``.
    """

    splits: tuple[Split, ...]
    objective: Objective
    caps: Caps
    lower_bound: float
    imbalance: float
    violations: tuple[Violation, ...]
    method: str
    heuristic_imbalance: float
    heuristic_violations: int
    solve_s: float
    stopped_by: str
    solver_rounds: int = 0

    @property
    def k(self) -> int:
        return len(self.splits)

    @property
    def violating_splits(self) -> int:
        """How many splits break at least one cap (the benchmark's ``violations``)."""
        return len({v.split for v in self.violations})

    @property
    def n_pieces(self) -> int:
        return sum(s.n_files for s in self.splits)

    def assignment(self) -> dict[str, int]:
        """Piece id → split index."""
        return {p.id: s.index for s in self.splits for p in s.pieces}
