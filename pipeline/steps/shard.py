"""The ``shard`` step: pack each accepted episode of a batch into WebDataset shards as soon as it is ready.

Per episode, its training-shaped artifacts become samples of
``shards/_episodes/<config hash>/<episode>/shard-NNNNNN.tar`` (more than one shard only when the episode is
larger than ``shard.target_shard_bytes``): a robot episode's transcoded MCAP (else its raw input), a video
episode's clips from its latest transcode, one sample each (never the vendor's own file: its B-frames and
rotation are what the transcode removed). Written, verified, published and recorded as
:func:`pipeline.shard.write_shards` does for a dataset version, with no dataset version yet: the catalog's
shard row can be placed in one later. Dataset versions get their own shards from their manifest with
``sluice shard NAME@VERSION``. The step is non-critical by default (:data:`pipeline.config.STEP_DEFAULTS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

from pipeline.enums import StepName
from pipeline.steps.base import Step, StepResult, WorkItem


class ShardStep(Step):
    """Shard the accepted episodes of a batch, one shard set per episode."""

    name = StepName.SHARD

    @cached_property
    def _annotate(self) -> Step:
        from pipeline.steps.annotate import AnnotateStep

        return AnnotateStep(self.vendor, self.ctx)

    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        """The batch's accepted episodes (the same selection as ``annotate``)."""
        return self._annotate.items(batch_items)

    def process(self, item: WorkItem) -> StepResult:
        from pipeline.annotate.inputs import episode_clips, episode_inputs
        from pipeline.enums import SourceKind, StepStatus
        from pipeline.shard.format import EPISODE_SHARDS_DATASET
        from pipeline.shard.writer import write_shards

        assert item.episode_id is not None
        ref = episode_inputs(self.ctx.engine, [item.episode_id])[item.episode_id]
        row = {"episode_id": ref.episode_id, "vendor": ref.vendor, "source_sha256": ref.source_sha256}
        if ref.kind is SourceKind.VIDEO:
            clips = episode_clips(self.ctx.engine, ref.episode_id)
            if not clips:
                # Not final: a later run shards the episode once a transcode has made its clips.
                return StepResult(
                    StepStatus.SKIPPED,
                    detail="a video episode is sharded from its clips, and no transcode has recorded any",
                    episode_id=item.episode_id,
                )
            rows = [{**row, "uri": c.uri, "clip_index": c.clip_index} for c in clips]
        else:
            rows = [{**row, "uri": ref.uri}]
        shards = write_shards(
            rows,
            int(self.vendor.shard.target_shard_bytes),
            self.ctx.store,
            EPISODE_SHARDS_DATASET,
            f"{self.config_hash}/{ref.episode_id}",
            engine=self.ctx.engine,
            config_hash=self.config_hash,
            code_version=self.ctx.code_version,
        )
        return StepResult.succeeded(
            episode_id=item.episode_id, shards=[s.uri for s in shards], written=sum(s.written for s in shards)
        )
