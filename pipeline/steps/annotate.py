"""The ``annotate`` step: run the vendor's enabled annotators on each accepted episode of a batch, in the
stages of its cascade (:mod:`pipeline.annotate.cascade`), and rank it (``annotate.rank``).

Annotators come from :mod:`pipeline.annotate.registry`, pinned to the versions in the vendor config; the
episode is decoded once for all of them (:class:`~pipeline.annotate.source.EpisodeSource`). A failing
annotator does not fail the episode: the others' results are stored, and the step run is recorded
``succeeded`` with reason ``annotator_failed`` and the failures in its detail (a warning). The step is
non-critical by default (:data:`pipeline.config.STEP_DEFAULTS`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from pipeline.enums import FileState, ReasonCode, SourceKind, StepName, StepStatus
from pipeline.steps.base import Resources, Step, StepResult, WorkItem

if TYPE_CHECKING:
    from pipeline.annotate.base import Annotator

log = logging.getLogger(__name__)

#: Episode states worth annotating (quarantined and duplicate inputs are not training data).
ANNOTATED_STATES = (FileState.ACCEPTED.value, FileState.ACCEPTED_WITH_FLAGS.value)


class AnnotateStep(Step):
    """Annotate the accepted episodes of a batch."""

    name = StepName.ANNOTATE

    @cached_property
    def annotators(self) -> list[Annotator]:
        from pipeline.annotate.registry import build_annotators

        return build_annotators(self.vendor.annotate)

    @cached_property
    def vendor_id(self) -> int:
        from pipeline.steps.ingest import IngestStep

        return IngestStep(self.vendor, self.ctx).vendor_id

    @property
    def resources(self) -> Resources:
        """The step's configured resources, raised to what the most demanding annotator declares."""
        base = super().resources
        needs = [a.resources for a in self.annotators]
        return Resources(
            cpus=max([base.cpus, *(r.cpus for r in needs)]),
            memory_bytes=max([base.memory_bytes, *(r.memory_bytes for r in needs)]),
            gpus=max([base.gpus, *(r.gpus for r in needs)]),
        )

    def setup(self) -> None:
        """Load each annotator, telling it what the worker was given. One that cannot load (its model is
        missing, its extra is not installed) is a warning here: it fails on each episode, recorded as its
        failure, and the other annotators run."""
        from pipeline.annotate.base import AnnotatorError

        granted = self.resources
        for annotator in self.annotators:
            annotator.grant(granted)
            try:
                annotator.setup()
            except AnnotatorError as exc:
                log.warning("%s; each episode records it as this annotator's failure", exc)

    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        """The batch's accepted episodes (every registered version of each path)."""
        from pipeline.steps.ingest import registered_episodes

        paths = [i.source_path or i.key for i in batch_items]
        known = registered_episodes(self.ctx.engine, self.vendor_id, paths)
        return [
            WorkItem(key=reg.alias, episode_id=reg.episode_id, source_path=path, size_bytes=reg.size_bytes)
            for path in dict.fromkeys(paths)
            for reg in known.get(path, ())
            if reg.state in ANNOTATED_STATES
        ]

    def process(self, item: WorkItem) -> StepResult:
        from pipeline.annotate.cascade import plan_stages, run_cascade
        from pipeline.annotate.inputs import episode_inputs, local_file
        from pipeline.annotate.run import record_outcomes
        from pipeline.annotate.source import EpisodeSource

        assert item.episode_id is not None
        ref = episode_inputs(self.ctx.engine, [item.episode_id])[item.episode_id]
        contract = self.vendor.topics
        with local_file(ref.uri) as path:
            source = EpisodeSource(
                episode_id=ref.episode_id,
                kind=ref.kind,
                path=path,
                sha256=ref.sha256,
                camera_topic=contract.cameras[0].topic if contract and contract.cameras else None,
                state_topic=contract.state[0].topic if contract and contract.state else None,
                action_topic=contract.actions[0].topic if contract and contract.actions else None,
                task=ref.task,
            )
            if source.kind is SourceKind.MCAP and source.camera_topic is None:
                source.camera_topic = _first_camera(source.topics)
            result = run_cascade(plan_stages(self.annotators, self.vendor.annotate), source)
            record_outcomes(
                self.ctx.engine,
                self.ctx.store,
                source,
                result,
                rank=self.vendor.annotate.rank,
                config_hash=self.config_hash,
                code_version=self.ctx.code_version,
                input_artifact_id=ref.artifact_id,
                input_blob_id=None if ref.artifact_id is not None else ref.blob_id,
            )
        failed = [o for o in result.outcomes if not o.ok]
        outputs = {
            "annotated": {o.name: o.version for o in result.outcomes if o.ok},
            "failed": [o.name for o in failed],
            "stopped_at": result.stopped_at,
            "skipped": [s["annotator"] for s in result.skipped],
        }
        if failed:
            detail = "; ".join(f"{o.name} v{o.version}: {o.error}" for o in failed)
            return StepResult(
                StepStatus.SUCCEEDED,
                reason=ReasonCode.ANNOTATOR_FAILED,
                detail=detail[:2000],
                outputs=outputs,
                episode_id=item.episode_id,
            )
        return StepResult.succeeded(episode_id=item.episode_id, **outputs)


def _first_camera(topics: dict[str, str]) -> str | None:
    from pipeline.annotate.source import VIDEO_SCHEMA

    cameras = sorted(t for t, schema in topics.items() if schema == VIDEO_SCHEMA)
    return cameras[0] if cameras else None
