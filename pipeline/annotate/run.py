"""Running a set of annotators on one episode and recording what each produced.

Each annotator runs on its own: one that raises is recorded as failed (with its error) and the others go on.
Each success is written as a JSON artifact under ``derived/annotate/<config hash>/<episode>/`` (staged, then
renamed, with its lineage) and as one catalog annotation row per key, in one transaction per annotator, so
a crash never leaves an annotator half-recorded. A new annotator version adds rows next to the old ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipeline.errors import StoreError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pipeline.annotate.base import Annotator
    from pipeline.annotate.cascade import CascadeResult
    from pipeline.annotate.source import EpisodeSource
    from pipeline.config.scoring import QualityRankOptions
    from pipeline.store import Store

log = logging.getLogger(__name__)

#: Catalog name of the rows the annotate step writes about itself (failures, cascade stages, skips).
ANNOTATE_SELF = "annotate"
#: Catalog name (annotator and key) of the quality rank; curation reads it as ``quality_rank``.
RANK_ANNOTATOR = RANK_KEY = "quality_rank"


@dataclass(frozen=True)
class AnnotatorOutcome:
    name: str
    version: str
    ok: bool
    values: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    cpu_s: float = 0.0  # CPU time of this process while it ran (all threads: onnxruntime's, FFmpeg's)


def run_annotators(annotators: list[Annotator], source: EpisodeSource) -> list[AnnotatorOutcome]:
    """Run each annotator that applies to the source; a failure is an outcome, never an exception."""
    outcomes = []
    for annotator in annotators:
        if not annotator.applies_to(source.kind):
            continue
        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            values = annotator.annotate(source)
            json.dumps(values, allow_nan=False)  # JSONB refuses NaN; fail here, naming the annotator
        except Exception as exc:  # an annotator's bug or bad input must not stop the others
            log.warning(
                "annotator %s v%s failed on episode %s: %s",
                annotator.name,
                annotator.version,
                source.episode_id,
                exc,
            )
            outcomes.append(
                AnnotatorOutcome(
                    annotator.name,
                    annotator.version,
                    ok=False,
                    error=f"{type(exc).__name__}: {exc}",
                    seconds=time.perf_counter() - started,
                    cpu_s=time.process_time() - cpu_started,
                )
            )
            continue
        outcomes.append(
            AnnotatorOutcome(
                annotator.name,
                annotator.version,
                True,
                values,
                seconds=time.perf_counter() - started,
                cpu_s=time.process_time() - cpu_started,
            )
        )
    return outcomes


def annotation_key(config_hash: str, episode_id: int, name: str, version: str) -> str:
    """Store key of one annotator's result file (a function of input and config, as every output)."""
    safe_version = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in version)
    return f"derived/annotate/{config_hash}/{episode_id}/{name}-v{safe_version}.json"


def record_outcomes(
    engine: Engine,
    store: Store,
    source: EpisodeSource,
    result: CascadeResult,
    *,
    rank: QualityRankOptions | None,
    config_hash: str,
    code_version: str,
    input_artifact_id: int | None,
    input_blob_id: int | None,
) -> None:
    """Publish each success as an artifact and record its keys; record the run itself (failures, the
    cascade's stages and skips) as ``annotate`` rows, and the episode's quality rank when one is configured."""
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.outputs import record_annotation, record_artifact
    from pipeline.enums import ArtifactKind, StepName

    factory = make_session_factory(engine)
    outcomes = result.outcomes
    for outcome in outcomes:
        if not outcome.ok:
            continue
        payload = {
            "episode_id": source.episode_id,
            "annotator": outcome.name,
            "version": outcome.version,
            "input_sha256": source.sha256,
            "values": outcome.values,
        }
        key = annotation_key(config_hash, source.episode_id, outcome.name, outcome.version)
        data = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        uri = _publish_bytes(store, key, data)
        with session_scope(factory) as session:
            artifact_id = record_artifact(
                session,
                kind=ArtifactKind.ANNOTATION,
                uri=uri,
                sha256=hashlib.sha256(data).hexdigest(),
                size_bytes=len(data),
                step=StepName.ANNOTATE,
                config_hash=config_hash,
                code_version=code_version,
                episode_id=source.episode_id,
                input_artifact_ids=[input_artifact_id] if input_artifact_id is not None else [],
                input_blob_ids=[input_blob_id] if input_blob_id is not None else [],
            )
            for k, value in outcome.values.items():
                record_annotation(
                    session,
                    episode_id=source.episode_id,
                    annotator=outcome.name,
                    annotator_version=outcome.version,
                    key=k,
                    value=value,
                    artifact_id=artifact_id,
                )
    failed = [{"annotator": o.name, "version": o.version, "error": o.error} for o in outcomes if not o.ok]
    # Keyed by the step's config hash: a run under another config keeps its own record.
    own: dict[str, Any] = {
        "annotate.failed": failed,
        "annotate.stages": [s.as_json() for s in result.stages],
        "annotate.stopped_at": result.stopped_at,
        "annotate.skipped": result.skipped,
    }
    with session_scope(factory) as session:
        for key, value in own.items():
            record_annotation(
                session,
                episode_id=source.episode_id,
                annotator=ANNOTATE_SELF,
                annotator_version=config_hash[:16],
                key=key,
                value=value,
            )
        if rank is not None:
            name, reasons = episode_rank(rank, result)
            for key, value in ((RANK_KEY, name), (f"{RANK_KEY}.reasons", reasons)):
                record_annotation(
                    session,
                    episode_id=source.episode_id,
                    annotator=RANK_ANNOTATOR,
                    annotator_version=rank.version,
                    key=key,
                    value=value,
                )


def episode_rank(rank: QualityRankOptions, result: CascadeResult) -> tuple[str, list[str]]:
    """The quality rank of an annotated episode: the fallback when the cascade stopped it (a stopped
    episode lacks the later stages' scores), else the first tier its scores meet."""
    if result.stopped_at is not None:
        unmet = result.stages[-1].unmet
        return rank.fallback, [f"stopped at stage {result.stopped_at}", *unmet]
    return rank.assign(result.values)


def _publish_bytes(store: Store, key: str, data: bytes) -> str:
    """Write ``data`` under ``key``: staged in the store's tmp area, then moved into place."""
    final = store.path(key)
    staging = store.path(f"tmp/{uuid.uuid4().hex}.part")
    try:
        store.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
        store.fs.pipe_file(staging, data)
        store.fs.mv(staging, final)
    except OSError as exc:
        raise StoreError(f"cannot write {store.url(key)}: {exc}") from exc
    return store.url(key)
