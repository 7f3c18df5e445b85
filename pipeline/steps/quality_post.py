"""The ``quality_post`` step: check each transcoded output against its source, keep it or quarantine it.

Robot episodes get :func:`pipeline.transcode.postgate.check_episode`, video clips
:func:`pipeline.transcode.clipgate.check_clips`. Every check is recorded with
``record_checks(gate=quality_post)``; a failed one quarantines the derived output: a ``QUARANTINED.json``
beside it says why (readers and later steps skip it) and the episode's state becomes ``quarantined`` with
the reasons added to the pre-gate's. The raw file is never touched, nor is the output deleted: it is
evidence.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.enums import CheckStatus, Gate, ReasonCode, SourceKind, StepName
from pipeline.steps.base import Step, StepResult, WorkItem
from pipeline.steps.transcode import episode_source, local_raw, local_raw_output, output_key, usable_items

if TYPE_CHECKING:
    from pipeline.store import Store
    from pipeline.transcode.postgate import CheckOutcome

log = logging.getLogger(__name__)


class QualityPostStep(Step):
    """Gate the transcoded outputs of a batch."""

    name = StepName.QUALITY_POST

    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        """Usable episodes that transcode recorded as done under its current config: with transcode switched
        off for a run (or not yet run) there is nothing to check, and nothing is quarantined for it."""
        from sqlalchemy import select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.models import StepRun
        from pipeline.enums import StepStatus

        usable = usable_items(self.ctx.engine, batch_items)
        ids = [i.episode_id for i in usable if i.episode_id is not None]
        if not ids:
            return []
        with session_scope(make_session_factory(self.ctx.engine)) as session:
            transcoded = set(
                session.execute(
                    select(StepRun.episode_id).where(
                        StepRun.episode_id.in_(ids),
                        StepRun.step == StepName.TRANSCODE.value,
                        StepRun.config_hash == self.transcode_config_hash,
                        StepRun.status == StepStatus.SUCCEEDED.value,
                    )
                ).scalars()
            )
        return [i for i in usable if i.episode_id in transcoded]

    @property
    def transcode_config_hash(self) -> str:
        """Where the outputs to check live: the transcode step's own config hash."""
        from pipeline.config import step_config_hash

        return step_config_hash(self.vendor, StepName.TRANSCODE)

    def process(self, item: WorkItem) -> StepResult:
        from pipeline.transcode.clips import CLIPS_MANIFEST
        from pipeline.transcode.layout import EPISODE_FILE
        from pipeline.transcode.postgate import CheckOutcome

        assert item.episode_id is not None
        source = episode_source(self.ctx.engine, item.episode_id)
        key = output_key(self.transcode_config_hash, source.episode_id)
        store = self.ctx.store
        target = f"{key}/{EPISODE_FILE if source.kind is SourceKind.MCAP else CLIPS_MANIFEST}"
        if not store.fs.exists(store.path(target)):
            outcomes = [
                CheckOutcome(
                    "output",
                    False,
                    ReasonCode.TRANSCODE_FAILED,
                    f"no transcoded output at {store.url(target)}",
                )
            ]
        else:
            with local_raw(store, source.sha256) as raw, local_raw_output(store, target) as output:
                outcomes = self._check(source.kind, output, raw, store.url(target))
        return self._record(source.episode_id, outcomes, store, key)

    def _check(self, kind: SourceKind, output: Path, raw: Path, uri: str) -> list[CheckOutcome]:
        from pipeline.transcode.clipgate import check_clips
        from pipeline.transcode.postgate import check_episode
        from pipeline.transcode.robot import RobotTranscodeConfig

        post = self.vendor.quality.post
        if kind is SourceKind.MCAP:
            config = RobotTranscodeConfig.from_vendor(self.vendor)
            return check_episode(output, raw, config, post, expected_sha256=self._recorded_sha256(uri))
        return check_clips(output.parent, raw, self.vendor.transcode, post)

    def _recorded_sha256(self, uri: str) -> str | None:
        from sqlalchemy import select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.models import Artifact

        with session_scope(make_session_factory(self.ctx.engine)) as session:
            return session.execute(select(Artifact.sha256).where(Artifact.uri == uri)).scalar_one_or_none()

    def _record(self, episode_id: int, outcomes: list[CheckOutcome], store: Store, key: str) -> StepResult:
        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.runs import CheckRow, record_checks
        from pipeline.catalog.sources import set_episode_state
        from pipeline.enums import FileState

        failed = [o for o in outcomes if not o.passed]
        # every failed outcome names its reason; the fallback only keeps the types honest
        reasons = [o.reason or ReasonCode.TRANSCODE_FAILED for o in failed]
        if failed:
            self._quarantine(store, key, failed, reasons)
        with session_scope(make_session_factory(self.ctx.engine)) as session:
            record_checks(
                session,
                episode_id=episode_id,
                gate=Gate.POST,
                config_hash=self.config_hash,
                checks=[CheckRow(o.name, o.status, o.observed, o.reason, detail=o.detail) for o in outcomes],
            )
            if failed:
                detail = "; ".join(f"{o.name}: {o.detail}" for o in failed)
                set_episode_state(
                    session,
                    episode_id,
                    FileState.QUARANTINED,
                    reasons=reasons,
                    detail=detail,
                    merge_reasons=True,
                    step=self.name,
                    config_hash=self.config_hash,
                )
        if failed:
            first = failed[0]
            return StepResult.rejected(reasons[0], f"{first.name}: {first.detail}", episode_id=episode_id)
        return StepResult.succeeded(
            episode_id=episode_id, checks=[o.name for o in outcomes if o.status is CheckStatus.PASSED]
        )

    def _quarantine(
        self, store: Store, key: str, failed: list[CheckOutcome], reasons: list[ReasonCode]
    ) -> None:
        """Mark the derived output as refused (a marker beside it; the output stays as evidence)."""
        from pipeline.transcode.layout import QUARANTINE_FILE

        body = {
            "reasons": [r.value for r in reasons],
            "checks": {o.name: o.detail for o in failed},
            "config_hash": self.config_hash,
        }
        path = store.path(f"{key}/{QUARANTINE_FILE}")
        if store.fs.exists(store.path(key)):
            with store.fs.open(path, "w") as fh:
                fh.write(json.dumps(body, indent=2, sort_keys=True) + "\n")
        log.warning("quarantined %s: %s", store.url(key), body["reasons"])
