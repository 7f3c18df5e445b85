"""What the annotate cascade cost and removed over a set of episodes, stage by stage.

Read from the ``annotate.stages`` rows the annotate step records per episode (:mod:`pipeline.annotate.run`):
the latest row of each episode, so a re-annotation under a new config replaces the old account.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline.catalog.models import Annotation

STAGES_KEY = "annotate.stages"


@dataclass(frozen=True)
class StageCost:
    """One cascade stage over many episodes."""

    stage: str
    annotators: list[str]
    reached: int  # episodes that ran this stage
    removed: int  # episodes this stage stopped
    cpu_s: float  # CPU seconds spent in it, summed over the episodes

    @property
    def cpu_s_per_episode(self) -> float:
        return self.cpu_s / self.reached if self.reached else 0.0


def stage_costs(session: Session, episode_ids: Sequence[int]) -> list[StageCost]:
    """Per stage, in cascade order: episodes reached and removed, CPU seconds (empty without a cascade)."""
    if not episode_ids:
        return []
    rows = session.execute(
        select(Annotation.episode_id, Annotation.value)
        .where(
            Annotation.annotator == "annotate",
            Annotation.key == STAGES_KEY,
            Annotation.episode_id.in_(list(episode_ids)),
        )
        .order_by(Annotation.episode_id, Annotation.updated_at, Annotation.id)
    ).all()
    latest: dict[int, list[dict[str, Any]]] = {r.episode_id: r.value for r in rows}  # ordered: last wins
    order: list[str] = []
    totals: dict[str, dict[str, Any]] = {}
    for stages in latest.values():
        for s in stages or []:
            name = str(s.get("stage"))
            if name not in totals:
                order.append(name)
                totals[name] = {"annotators": [], "reached": 0, "removed": 0, "cpu_s": 0.0}
            t = totals[name]
            t["reached"] += 1
            t["removed"] += 0 if s.get("passed", True) else 1
            t["cpu_s"] += float(s.get("cpu_s") or 0.0)
            t["annotators"] = sorted(set(t["annotators"]) | set(s.get("ran") or []))
    return [StageCost(name, **totals[name]) for name in order]
