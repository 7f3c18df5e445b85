"""The ``ingest`` step: land each discovered file in the raw store and register it, exactly once.

Per file: stream it into ``raw/<sha256>`` (hashed while copying, re-read and verified, published
atomically; see :meth:`pipeline.store.Store.land`), then in one short transaction register the blob, the
vendor path as its alias and the episode that stands for this input. The same bytes under another name make
that episode a ``duplicate`` of the first (empty files excepted: each is quarantined as ``zero_bytes``).
Constraints make every write an idempotent upsert; a per-vendor advisory lock serialises the registration
of two runs of the same vendor, and a per-blob lock decides which of two names is the original, also
across vendors.

A path keeps the content it was first registered with. When a vendor re-delivers different bytes under a
known path, the new content is a new input: it is registered under the alias ``<path>#sha256=<first 16 hex
digits>`` and gets an episode (and a state) of its own, so that nothing is dropped and nothing is
overwritten. Path text is stored as UTF-8 with undecodable name bytes written as ``\\xNN``.

Probing and gating happen in ``quality_pre``; an episode leaves ingest ``pending`` (or ``duplicate``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pipeline.enums import FileState, StepName
from pipeline.steps.base import Step, StepResult, WorkItem

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)

#: First key of the per-vendor advisory lock (``pg_advisory_xact_lock(int4, int4)``); any fixed int4.
VENDOR_LOCK_NAMESPACE = 0x5100E
#: Separates a path from the content of a later version delivered under the same path.
VERSION_MARK = "#sha256="
#: Hex digits of the sha256 in a version alias: 64 bits, so two versions of one path never collide.
VERSION_DIGITS = 16


def catalog_path(path: str) -> str:
    """The text the catalog stores for a vendor path.

    File names are bytes; the local filesystem hands undecodable ones to Python as lone surrogates, which
    Postgres cannot store. They are written as ``\\xNN`` escapes instead (one-way, readable, stable).
    """
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def version_alias(path: str, sha256: str) -> str:
    """The alias under which a changed file's new content is registered."""
    return f"{catalog_path(path)}{VERSION_MARK}{sha256[:VERSION_DIGITS]}"


@dataclass(frozen=True)
class Registered:
    """An episode registered for a discovered path (its first content, or a later version)."""

    episode_id: int
    size_bytes: int
    alias: str
    state: str


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
    def source(self) -> tuple[Any, str]:
        """(filesystem, root path) of the vendor's source."""
        import fsspec

        url = self.vendor.source_url(self.ctx.settings.project_dir_abs)
        fs, root = fsspec.core.url_to_fs(url, **dict(self.vendor.source.storage_options))
        return fs, root.rstrip("/")

    def setup(self) -> None:
        _ = self.vendor_id, self.source
        # A lander killed mid-copy leaves its staging file under tmp/ (never referenced, never published).
        self.ctx.store.sweep_staging(older_than_s=self.ctx.settings.staging_max_age_s)

    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        """Every file of the batch; files whose content is already registered are marked for skipping."""
        paths = [i.source_path or i.key for i in batch_items]
        known = registered_episodes(self.ctx.engine, self.vendor_id, paths)
        out = []
        for item, path in zip(batch_items, paths, strict=True):
            # Same path and same size as a registered version: the runner skips it if its ingest is final.
            # Another size is changed content, which is landed and registered as a new version.
            hit = next((r for r in known.get(path, ()) if r.size_bytes == item.size_bytes), None)
            out.append(
                WorkItem(
                    key=item.key,
                    episode_id=hit.episode_id if hit is not None else None,
                    source_path=path,
                    size_bytes=item.size_bytes,
                )
            )
        return out

    def process(self, item: WorkItem) -> StepResult:
        from sqlalchemy import func, select

        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.errors import CatalogConflictError
        from pipeline.catalog.sources import (
            claim_original,
            ensure_episode,
            register_blob,
            register_source_file,
            set_episode_state,
        )

        fs, root = self.source
        path = item.source_path or item.key
        landed = self.ctx.store.land(fs, f"{root}/{path}")
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
            alias = catalog_path(path)  # also what is logged: a name may hold undecodable bytes
            try:
                source = register_source_file(session, vendor_id=self.vendor_id, path=alias, blob_id=blob_id)
            except CatalogConflictError:
                log.warning("%s changed since it was registered; registering the new content too", alias)
                alias = version_alias(path, landed.sha256)
                source = register_source_file(session, vendor_id=self.vendor_id, path=alias, blob_id=blob_id)
            episode = ensure_episode(
                session,
                vendor_id=self.vendor_id,
                source_file_id=source.id,
                blob_id=blob_id,
                kind=self.vendor.kind,
            )
            # An empty file has no content to share: each one is its own failed upload (zero_bytes).
            original = (
                claim_original(session, blob_id=blob_id, episode_id=episode.id) if landed.size_bytes else None
            )
            if original is not None:
                set_episode_state(
                    session,
                    episode.id,
                    FileState.DUPLICATE,
                    duplicate_of_id=original,
                    detail=f"same bytes (sha256 {landed.sha256[:12]}…) as episode {original}",
                )
        log.debug("ingested %s -> %s (episode %s)", alias, landed.sha256, episode.id)
        return StepResult.succeeded(
            episode_id=episode.id,
            sha256=landed.sha256,
            alias=alias,
            new_object=landed.created,
            duplicate_of=original,
        )


def registered_episodes(engine: Engine, vendor_id: int, paths: Sequence[str]) -> dict[str, list[Registered]]:
    """For each given path already registered for a vendor: its episodes, first content first."""
    from sqlalchemy import func, select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Blob, Episode, SourceFile

    if not paths:
        return {}
    by_text = {catalog_path(p): p for p in paths}
    base = func.split_part(SourceFile.path, VERSION_MARK, 1)
    with session_scope(make_session_factory(engine)) as session:
        rows = session.execute(
            select(base.label("base"), SourceFile.path, Episode.id, Episode.state, Blob.size_bytes)
            .join(Episode, Episode.source_file_id == SourceFile.id)
            .join(Blob, Blob.id == SourceFile.blob_id)
            .where(SourceFile.vendor_id == vendor_id, base.in_(list(by_text)))
            .order_by(SourceFile.id)
        ).all()
    out: dict[str, list[Registered]] = {}
    for row in rows:
        out.setdefault(by_text[row.base], []).append(Registered(row.id, row.size_bytes, row.path, row.state))
    return out
