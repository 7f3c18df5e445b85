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
    from pipeline.annotate.source import EpisodeSource
    from pipeline.store import Store

log = logging.getLogger(__name__)

#: Catalog name of the rows the annotate step writes about itself (which annotators failed).
ANNOTATE_SELF = "annotate"


@dataclass(frozen=True)
class AnnotatorOutcome:
    name: str
    version: str
    ok: bool
    values: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0


def run_annotators(annotators: list[Annotator], source: EpisodeSource) -> list[AnnotatorOutcome]:
    """Run each annotator that applies to the source; a failure is an outcome, never an exception."""
    outcomes = []
    for annotator in annotators:
        if not annotator.applies_to(source.kind):
            continue
        started = time.perf_counter()
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
                )
            )
            continue
        outcomes.append(
            AnnotatorOutcome(
                annotator.name, annotator.version, True, values, seconds=time.perf_counter() - started
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
    outcomes: list[AnnotatorOutcome],
    *,
    config_hash: str,
    code_version: str,
    input_artifact_id: int | None,
    input_blob_id: int | None,
) -> None:
    """Publish each success as an artifact and record its keys; record failures as one ``annotate`` row."""
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.outputs import record_annotation, record_artifact
    from pipeline.enums import ArtifactKind, StepName

    factory = make_session_factory(engine)
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
    with session_scope(factory) as session:
        # Keyed by the step's config hash: a run under another config keeps its own record.
        record_annotation(
            session,
            episode_id=source.episode_id,
            annotator=ANNOTATE_SELF,
            annotator_version=config_hash[:16],
            key="annotate.failed",
            value=failed,
        )


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
