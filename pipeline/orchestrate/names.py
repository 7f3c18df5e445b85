"""Task names shared by the DAG factory and the run-level logic (one word per concept).

The per-batch steps are named by :class:`pipeline.enums.StepName`; these are the run-level tasks around
them. ``finalize`` reads the states of all of them to decide the run's outcome.
"""

from __future__ import annotations

from pipeline.enums import StepName

VALIDATE_CONF = "validate_conf"
DISCOVER = "discover"
PLAN = "plan"
#: Near-duplicate grouping across every vendor's episodes, after the batches and before the warehouse sync.
DEDUP = "dedup"
WAREHOUSE_SYNC = "warehouse_sync"
FINALIZE = "finalize"

#: Run-level tasks before the batches; each is critical: without it there is nothing to process.
RUN_TASKS: tuple[str, ...] = (VALIDATE_CONF, DISCOVER, PLAN)

#: The per-batch steps in pipeline order (the order of :class:`StepName`).
STEP_ORDER: tuple[StepName, ...] = tuple(StepName)

#: Steps whose work is media decoding or encoding: run on Ray when a cluster address is configured.
HEAVY_STEPS = frozenset({StepName.QUALITY_PRE, StepName.TRANSCODE, StepName.QUALITY_POST, StepName.ANNOTATE})
