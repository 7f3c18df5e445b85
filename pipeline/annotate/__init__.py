"""Annotators: a registry of pluggable, versioned annotators run per episode by the ``annotate`` step.

* :mod:`.base` – the contract (:class:`Annotator`: name, inputs, kinds, resources, params; ``annotate``).
* :mod:`.registry` – name -> class; :func:`register_annotator` adds a deployment's own.
* :mod:`.source` – :class:`EpisodeSource`: an episode decoded lazily, once for all annotators.
* :mod:`.video`, :mod:`.robot` – built-ins that need no model; :mod:`.model` – model-backed annotators.
* :mod:`.run` – run annotators on an episode and record their results (artifacts + catalog rows).
"""

from pipeline.annotate.base import Annotator, AnnotatorError, AnnotatorInput
from pipeline.annotate.registry import (
    BUILTIN_ANNOTATORS,
    annotator_class,
    annotator_names,
    build_annotators,
    register_annotator,
    unregister_annotator,
)
from pipeline.annotate.source import EpisodeSource, Frames, StateSeries

__all__ = [
    "BUILTIN_ANNOTATORS",
    "Annotator",
    "AnnotatorError",
    "AnnotatorInput",
    "EpisodeSource",
    "Frames",
    "StateSeries",
    "annotator_class",
    "annotator_names",
    "build_annotators",
    "register_annotator",
    "unregister_annotator",
]
