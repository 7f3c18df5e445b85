"""The batch planner: split a run's files into k balanced batches within caps, size the workers, stagger.

Nothing here needs Airflow or a database. The light names (value objects, staggering, sizing) import
without numpy or OR-tools, because the DAG factory calls :func:`stagger_vendors` at parse time; ``split``,
``lpt`` and ``cut`` load the heavy modules on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.planner.model import (
    CapInfeasibleError,
    Caps,
    Item,
    Piece,
    Plan,
    PlanInputError,
    PlannerError,
    Split,
    Violation,
)
from pipeline.planner.staggering import stagger, stagger_vendors
from pipeline.planner.workers import Limits, Sizing, choose_k_and_workers, chunk

if TYPE_CHECKING:
    from pipeline.planner.cutting import cut
    from pipeline.planner.splitting import lpt, split

__all__ = [
    "CapInfeasibleError",
    "Caps",
    "Item",
    "Limits",
    "Piece",
    "Plan",
    "PlanInputError",
    "PlannerError",
    "Sizing",
    "Split",
    "Violation",
    "choose_k_and_workers",
    "chunk",
    "cut",
    "lpt",
    "split",
    "stagger",
    "stagger_vendors",
]

_LAZY = {
    "split": "pipeline.planner.splitting",
    "lpt": "pipeline.planner.splitting",
    "cut": "pipeline.planner.cutting",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pipeline.planner' has no attribute {name!r}")
