"""Which class implements each step. Modules are imported on first use to keep imports light."""

from __future__ import annotations

import importlib

from pipeline.enums import StepName
from pipeline.errors import UnknownChoiceError
from pipeline.steps.base import Step

#: step name -> "module:Class"; the module is named after the step (one word per concept).
STEP_CLASSES: dict[StepName, str] = {
    StepName.INGEST: "pipeline.steps.ingest:IngestStep",
    StepName.QUALITY_PRE: "pipeline.steps.quality_pre:QualityPreStep",
    StepName.TRANSCODE: "pipeline.steps.transcode:TranscodeStep",
    StepName.QUALITY_POST: "pipeline.steps.quality_post:QualityPostStep",
    StepName.ANNOTATE: "pipeline.steps.annotate:AnnotateStep",
    StepName.SHARD: "pipeline.steps.shard:ShardStep",
}


def step_class(name: StepName) -> type[Step]:
    """The Step subclass for ``name``; a clear error for a step that has no implementation yet."""
    target = STEP_CLASSES.get(StepName(name))
    if target is None:
        raise UnknownChoiceError("implemented step", name, [s.value for s in STEP_CLASSES])
    module_name, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(cls, type) and issubclass(cls, Step)):
        raise TypeError(f"{target} is not a Step subclass")
    return cls
