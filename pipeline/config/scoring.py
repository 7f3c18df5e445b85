"""How the ``annotate`` step turns scores into decisions: the quality rank and the cascade of stages.

Both live under ``annotate`` in the vendor config, so they are part of the annotate step's config hash: a
changed threshold is a changed config, and its results are recorded beside the old ones.

* ``annotate.rank`` – tiers, best first; an episode gets the first tier whose every bound holds, else the
  ``fallback`` rank. Dataset specs filter on the result (``quality_rank IN $ranks``).
* ``annotate.stages`` – annotators ordered into stages, cheap first; an episode failing a stage's bounds
  skips every later stage (recorded as skipped, with the stage that stopped it).

A bound names one annotation key and a ``min`` and/or ``max``; a key an episode lacks (its annotator failed,
or was skipped) fails the bound: a rank is never granted on a score nobody measured.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from pipeline.config.types import FrozenModel, Loc, Slug, raise_problems


class ScoreBound(FrozenModel):
    """One annotation key held to ``min`` (at least) and/or ``max`` (at most)."""

    key: str = Field(min_length=1, max_length=200, description="Annotation key, e.g. blockiness.ratio.")
    min: float | None = Field(default=None, description="The key's value must be at least this.")
    max: float | None = Field(default=None, description="The key's value must be at most this.")

    @model_validator(mode="after")
    def _check(self) -> ScoreBound:
        if self.min is None and self.max is None:
            raise_problems([((), f"bound on {self.key!r} gives neither min nor max")])
        if self.min is not None and self.max is not None and self.min > self.max:
            raise_problems([((), f"bound on {self.key!r} has min {self.min} above max {self.max}")])
        return self

    def unmet(self, values: dict[str, Any]) -> str | None:
        """Why ``values`` fail this bound (None when they meet it)."""
        if self.key not in values:
            return f"{self.key} missing"
        value = values[self.key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{self.key} is {value!r}, not a number"
        if self.min is not None and value < self.min:
            return f"{self.key} {value} < min {self.min}"
        if self.max is not None and value > self.max:
            return f"{self.key} {value} > max {self.max}"
        return None


def unmet_bounds(bounds: list[ScoreBound], values: dict[str, Any]) -> list[str]:
    """Every bound ``values`` fail, as readable reasons, in declaration order."""
    return [reason for b in bounds if (reason := b.unmet(values)) is not None]


class RankTier(FrozenModel):
    """One quality rank and what an episode needs to get it."""

    name: Slug = Field(description="Rank name (what dataset specs filter on).")
    require: list[ScoreBound] = Field(default_factory=list, description="Bounds that must all hold.")


class QualityRankOptions(FrozenModel):
    """Tiers of the quality rank, best first; the first whose bounds all hold is the episode's rank."""

    version: str = Field(min_length=1, description="Rank version; quote it in YAML ('1', not 1).")
    tiers: list[RankTier] = Field(min_length=1, description="Ranks, best first.")
    fallback: Slug = Field(default="reject", description="Rank of an episode that meets no tier.")

    @model_validator(mode="after")
    def _check(self) -> QualityRankOptions:
        problems: list[tuple[Loc, str]] = []
        seen: set[str] = set()
        for i, tier in enumerate(self.tiers):
            if tier.name in seen or tier.name == self.fallback:
                problems.append((("tiers", i, "name"), f"rank {tier.name!r} is named twice"))
            seen.add(tier.name)
        raise_problems(problems)
        return self

    def assign(self, values: dict[str, Any]) -> tuple[str, list[str]]:
        """The rank of an episode with these annotation ``values``, and (for the fallback) the bounds of the
        most lenient tier that it fails."""
        unmet: list[str] = []
        for tier in self.tiers:
            unmet = unmet_bounds(tier.require, values)
            if not unmet:
                return tier.name, []
        return self.fallback, unmet


class CascadeStage(FrozenModel):
    """Annotators run together; an episode failing ``require`` skips every later stage."""

    name: Slug = Field(description="Stage name (recorded with what it stopped).")
    annotators: list[Slug] = Field(min_length=1, description="Annotators of this stage, by registry name.")
    require: list[ScoreBound] = Field(default_factory=list, description="Bounds an episode must meet.")
