"""The annotate cascade: annotators in stages, cheap first, so expensive analysis runs only where it pays.

:func:`plan_stages` turns ``annotate.stages`` into runnable stages (annotators in no stage run first, in a
stage of their own with no bounds, named :data:`UNSTAGED`). :func:`run_cascade` runs them in order on one
episode: after each stage its bounds are checked against every value recorded so far, and an episode that
fails them skips the remaining stages. What each stage cost (CPU seconds of this process, which includes
the decode the first annotator triggers) and why it stopped the episode are part of the result, which the
annotate step records beside the scores (:func:`pipeline.annotate.run.record_outcomes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipeline.annotate.run import AnnotatorOutcome, run_annotators

if TYPE_CHECKING:
    from pipeline.annotate.base import Annotator
    from pipeline.annotate.source import EpisodeSource
    from pipeline.config import AnnotateOptions
    from pipeline.config.scoring import ScoreBound

#: Name of the implicit first stage: the annotators no declared stage names.
UNSTAGED = "unstaged"


@dataclass(frozen=True)
class Stage:
    name: str
    annotators: list[Annotator]
    require: list[ScoreBound] = field(default_factory=list)


@dataclass(frozen=True)
class StageReport:
    """One stage on one episode: what ran, what it cost, and whether the episode went on."""

    stage: str
    ran: list[str]
    cpu_s: float
    passed: bool
    unmet: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "ran": self.ran,
            "cpu_s": round(self.cpu_s, 4),
            "passed": self.passed,
            "unmet": self.unmet,
        }


@dataclass(frozen=True)
class CascadeResult:
    outcomes: list[AnnotatorOutcome]
    stages: list[StageReport]
    stopped_at: str | None  # the stage whose bounds the episode failed (None: it went through)
    skipped: list[dict[str, str]]  # {"annotator", "version", "stage"}: what the stop spared

    @property
    def values(self) -> dict[str, Any]:
        """Every value the episode's successful annotators recorded (later annotators win a shared key)."""
        out: dict[str, Any] = {}
        for o in self.outcomes:
            out.update(o.values)
        return out


def plan_stages(annotators: Sequence[Annotator], options: AnnotateOptions) -> list[Stage]:
    """The stages to run, in order: the unstaged annotators first, then each declared stage's enabled ones."""
    by_name = {a.name: a for a in annotators}
    staged = {name for stage in options.stages for name in stage.annotators}
    plan = []
    free = [a for a in annotators if a.name not in staged]
    if free:
        plan.append(Stage(UNSTAGED, free))
    for stage in options.stages:
        members = [by_name[n] for n in stage.annotators if n in by_name]
        plan.append(Stage(stage.name, members, list(stage.require)))
    return plan


def run_cascade(stages: Sequence[Stage], source: EpisodeSource) -> CascadeResult:
    """Run ``stages`` on one episode, stopping after the first whose bounds it fails."""
    from pipeline.config.scoring import unmet_bounds

    outcomes: list[AnnotatorOutcome] = []
    reports: list[StageReport] = []
    values: dict[str, Any] = {}
    for position, stage in enumerate(stages):
        done = run_annotators(stage.annotators, source)
        outcomes += done
        for o in done:
            values.update(o.values)
        unmet = unmet_bounds(stage.require, values)
        reports.append(
            StageReport(stage.name, [o.name for o in done], sum(o.cpu_s for o in done), not unmet, unmet)
        )
        if unmet:
            skipped = [
                {"annotator": a.name, "version": a.version, "stage": later.name}
                for later in stages[position + 1 :]
                for a in later.annotators
                if a.applies_to(source.kind)
            ]
            return CascadeResult(outcomes, reports, stage.name, skipped)
    return CascadeResult(outcomes, reports, None, [])
