"""The annotator registry: registry name -> implementing class, imported on first use.

Built-ins are listed in :data:`BUILTIN_ANNOTATORS`; a deployment adds its own with
:func:`register_annotator` (a class, or a ``"module:Class"`` string that Ray workers can import too). The
vendor config names annotators by these names under ``annotate.annotators``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipeline.annotate.base import Annotator
from pipeline.errors import UnknownChoiceError

if TYPE_CHECKING:
    from pipeline.config import AnnotateOptions

#: name -> "module:Class" of every annotator that ships with Sluice.
BUILTIN_ANNOTATORS: dict[str, str] = {
    "motion_energy": "pipeline.annotate.video:MotionEnergy",
    "image_stats": "pipeline.annotate.video:ImageStats",
    "scene_stats": "pipeline.annotate.video:SceneStats",
    "video_phash": "pipeline.annotate.video:VideoPhash",
    "blockiness": "pipeline.annotate.coding:Blockiness",
    "interlace": "pipeline.annotate.coding:Interlace",
    "text": "pipeline.annotate.detectors:TextPresence",
    "faces": "pipeline.annotate.detectors:Faces",
    "gripper_events": "pipeline.annotate.robot:GripperEvents",
    "task_text": "pipeline.annotate.robot:TaskText",
    "message_fingerprint": "pipeline.annotate.robot:MessageFingerprint",
    "frame_classifier": "pipeline.annotate.model:FrameClassifier",
    "caption": "pipeline.annotate.caption:Captioner",
}

_registry: dict[str, str | type[Annotator]] = dict(BUILTIN_ANNOTATORS)


def register_annotator(name: str, target: str | type[Annotator]) -> None:
    """Add (or replace) an annotator under ``name``: a class, or ``"module:Class"``."""
    _registry[name] = target


def unregister_annotator(name: str) -> None:
    """Remove a registered annotator (built-ins come back as they were)."""
    if name in BUILTIN_ANNOTATORS:
        _registry[name] = BUILTIN_ANNOTATORS[name]
    else:
        _registry.pop(name, None)


def annotator_names() -> list[str]:
    return sorted(_registry)


def annotator_class(name: str) -> type[Annotator]:
    """The class registered under ``name``; the error lists the registered names."""
    target = _registry.get(name)
    if target is None:
        raise UnknownChoiceError("annotator", name, _registry)
    if isinstance(target, str):
        module_name, _, attr = target.partition(":")
        target = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(target, type) and issubclass(target, Annotator)):
        raise TypeError(f"annotator {name!r} resolves to {target!r}, not an Annotator subclass")
    return target


def build_annotators(options: AnnotateOptions | Mapping[str, object]) -> list[Annotator]:
    """Instances of every enabled annotator of a vendor's ``annotate`` section, in name order."""
    from pipeline.config import AnnotateOptions

    opts = options if isinstance(options, AnnotateOptions) else AnnotateOptions.model_validate(options)
    out = []
    for name, config in sorted(opts.annotators.items()):
        if config.enabled:
            out.append(annotator_class(name)(config.version, config.params))
    return out
