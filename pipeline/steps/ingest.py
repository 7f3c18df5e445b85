"""The ``ingest`` step: land each discovered file in the raw store and register it, exactly once.

Per file: stream it into ``raw/<sha256>`` (hashed while copying, re-read and verified, published
atomically), then in one short transaction register the blob, the vendor path as its alias and the
episode that stands for this input. The same bytes under another name make that episode a ``duplicate``
of the first. Constraints make every write an idempotent upsert; a per-vendor advisory lock serialises the
registration of two runs of the same vendor, and a per-blob lock decides which of two names is the original.

Probing and gating happen in ``quality_pre``; an episode leaves ingest ``pending`` (or ``duplicate``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cached_property

from pipeline.enums import FileState, StepName
from pipeline.steps.base import Step, StepResult, WorkItem

log = logging.getLogger(__name__)

#: First key of the per-vendor advisory lock (``pg_advisory_xact_lock(int4, int4)``); any fixed int4.
VENDOR_LOCK_NAMESPACE = 0x5100E


class IngestStep(Step):
    """Land and register the files of a batch."""

    name = StepName.INGEST

    @cached_property
    def vendor_id(self) -> int:
        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.sources import upsert_vendor
        from pipeline.config import config_hash

        with session_scope(make_session_factory(self.ctx.engine)) as session:
            return upsert_vendor(
                session,
                name=self.vendor.name,
                kind=self.vendor.kind,
                config_hash=config_hash(self.vendor),
                config=self.vendor.model_dump(mode="json"),
            )

    @cached_property
    def source(self) -> tuple[object, str]:
        """(filesystem, root path) of the vendor's source."""
        import fsspec

        url = self.vendor.source_url(self.ctx.settings.project_dir_abs)
        fs, root = fsspec.core.url_to_fs(url, **dict(self.vendor.source.storage_options))
        return fs, root.rstrip("/")

    def setup(self) -> None:
        _ = self.vendor_id, self.source

    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        """Every file of the batch; files already registered under this config are marked for skipping."""
        known = registered_episodes(
            self.ctx.engine, self.vendor_id, [i.source_path or i.key for i in batch_items]
        )
        out = []
        for item in batch_items:
            path = item.source_path or item.key
            hit = known.get(path)
            # Same path and same size as recorded: the runner checks the step run and skips it if final.
            # A different size at a known path is a changed file; landing it surfaces the conflict.
            if hit is not None and hit[1] == item.size_bytes:
                out.append(
                    WorkItem(key=item.key, episode_id=hit[0], source_path=path, size_bytes=item.size_bytes)
                )
            else:
                out.append(item)
        return out

    def process(self, item: WorkItem) -> StepResult:
        from sqlalchemy import func, select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.sources import (
            claim_original,
            ensure_episode,
            register_blob,
            register_source_file,
            set_episode_state,
        )

        fs, root = self.source
        path = item.source_path or item.key
        landed = self.ctx.store.land(fs, f"{root}/{path}")  # type: ignore[arg-type]
        verified_at = datetime.now(UTC)
        with session_scope(make_session_factory(self.ctx.engine)) as session:
            session.execute(select(func.pg_advisory_xact_lock(VENDOR_LOCK_NAMESPACE, self.vendor_id)))
            blob_id = register_blob(
                session,
                sha256=landed.sha256,
                size_bytes=landed.size_bytes,
                raw_uri=landed.uri,
                verified_at=verified_at,
            )
            source = register_source_file(session, vendor_id=self.vendor_id, path=path, blob_id=blob_id)
            episode = ensure_episode(
                session,
                vendor_id=self.vendor_id,
                source_file_id=source.id,
                blob_id=blob_id,
                kind=self.vendor.kind,
            )
            original = claim_original(session, blob_id=blob_id, episode_id=episode.id)
            if original is not None and original != episode.id:
                set_episode_state(
                    session,
                    episode.id,
                    FileState.DUPLICATE,
                    duplicate_of_id=original,
                    detail=f"same bytes (sha256 {landed.sha256[:12]}…) as episode {original}",
                )
        log.debug("ingested %s -> %s (episode %s)", path, landed.sha256, episode.id)
        return StepResult.succeeded(
            episode_id=episode.id, sha256=landed.sha256, new_object=landed.created, duplicate_of=original
        )


def registered_episodes(engine: object, vendor_id: int, paths: Sequence[str]) -> dict[str, tuple[int, int]]:
    """path -> (episode id, blob size) for the given paths already registered for a vendor."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Blob, Episode, SourceFile

    if not paths:
        return {}
    with session_scope(make_session_factory(engine)) as session:  # type: ignore[arg-type]
        rows = session.execute(
            select(SourceFile.path, Episode.id, Blob.size_bytes)
            .join(Episode, Episode.source_file_id == SourceFile.id)
            .join(Blob, Blob.id == SourceFile.blob_id)
            .where(SourceFile.vendor_id == vendor_id, SourceFile.path.in_(list(paths)))
        ).all()
    return {row.path: (row.id, row.size_bytes) for row in rows}
