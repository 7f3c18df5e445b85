"""Canonical config hashes: what every output stores beside itself.

:func:`config_hash` covers a whole validated model (defaults included), so it changes when any value
changes and never when only key order, comments or formatting do. :func:`step_config_hash` covers only the
sections a step reads (:data:`STEP_READS`): changing the annotators does not invalidate transcoded
episodes, and changing a step's pool or CPUs (orchestration, not output) invalidates nothing. A step's
output also depends on its inputs, whose own hashes travel with them in the lineage; a step hash covers
only the step's own knobs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from pipeline.config.models import VendorConfig
from pipeline.enums import StepName

#: Bumped when the meaning of a config value changes without its text changing (a new default encoder
#: behaviour, a renamed field's semantics), so that every stored hash is invalidated at once.
CONFIG_FORMAT_VERSION = 1

#: The dotted paths of :class:`VendorConfig` each step reads. Orchestration sections (schedule, planner,
#: pools, steps) are nobody's input; neither are the source's location and credentials.
STEP_READS: dict[StepName, tuple[str, ...]] = {
    StepName.INGEST: ("kind", "topics", "video", "calibration", "ingest"),
    StepName.QUALITY_PRE: (
        "kind",
        "topics",
        "video",
        "calibration",
        "episode_metadata",
        "timestamps",
        "quality.pre",
    ),
    StepName.TRANSCODE: ("kind", "topics", "timestamps.truth", "transcode"),
    StepName.QUALITY_POST: ("kind", "transcode", "quality.post"),
    StepName.ANNOTATE: ("kind", "annotate"),
    StepName.SHARD: ("kind", "shard"),
}


def canonical_json(value: BaseModel | Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, UTF-8 text, no NaN; models dumped with their defaults."""
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _sha256(payload: Any) -> str:
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def config_hash(model: BaseModel) -> str:
    """sha256 (hex) of the canonical JSON of a validated config model, defaults included."""
    return _sha256({"format": CONFIG_FORMAT_VERSION, "config": model.model_dump(mode="json")})


def step_config_hash(vendor: VendorConfig, step: StepName | str) -> str:
    """sha256 (hex) of only what ``step`` reads of ``vendor`` (:data:`STEP_READS`)."""
    step = StepName(step)
    dumped = vendor.model_dump(mode="json")
    reads = {path: _at(dumped, path) for path in STEP_READS[step]}
    return _sha256({"format": CONFIG_FORMAT_VERSION, "step": step.value, "reads": reads})


def step_config_hashes(vendor: VendorConfig) -> dict[StepName, str]:
    """Every step's config hash, in pipeline order."""
    return {step: step_config_hash(vendor, step) for step in StepName}


def _at(data: dict[str, Any], dotted: str) -> Any:
    value: Any = data
    for part in dotted.split("."):
        value = value[part]  # a KeyError here is a typo in STEP_READS, not a config problem
    return value
