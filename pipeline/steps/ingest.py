"""The ``ingest`` step: land each discovered file in the raw store and register it, exactly once.

Per file: stream it into ``raw/<sha256>`` (hashed while copying, re-read and verified, published
atomically; see :meth:`pipeline.store.Store.land`), then in one short transaction register the blob, the
vendor path as its alias and the episode that stands for this input. The same bytes under another name make
that episode a ``duplicate`` of the first (empty files excepted: each is quarantined as ``zero_bytes``).
Constraints make every write an idempotent upsert; a per-vendor advisory lock serialises the registration
of two runs of the same vendor, and a per-blob lock decides which of two names is the original, also
across vendors.

Content is identified by its hash, never by (path, size). A path keeps every content it held: when a vendor
re-delivers different bytes under a known path (even of the same size), the new content is the path's next
*version*, a new input with an episode (and a state) of its own, so that nothing is dropped and nothing is
overwritten. A known file is skipped without being read again only when its state proves it unchanged
since it was hashed (:func:`pipeline.store.identifies_content`: a local file's inode and ``ctime``, which
every write moves, or an object's version mark); anything else is landed again and its hash decides.
Path text is an injective encoding of the name's bytes (:func:`catalog_path`).

A local file is opened beneath the vendor root without following links (:mod:`pipeline.beneath`): a link
swapped in after discovery, a hard link or a FIFO is refused, recorded in ``passed_over_files`` and
never copied.

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

from pipeline.enums import FileState, PassOverReason, ReasonCode, StepName, StepStatus
from pipeline.steps.base import Step, StepResult, WorkItem

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)

#: First key of the per-vendor advisory lock (``pg_advisory_xact_lock(int4, int4)``); any fixed int4.
VENDOR_LOCK_NAMESPACE = 0x5100E


def catalog_path(path: str) -> str:
    """The text the catalog stores for a vendor path: the name's bytes, encoded injectively.

    File names are bytes; the local filesystem hands undecodable ones to Python as lone surrogates, which
    Postgres cannot store. They are written as ``\\xNN``, and so that no other name can come out the
    same text, a backslash is written ``\\\\`` and a NUL (which Postgres text cannot hold) ``\\x00``.
    Every other character is kept: most names read as themselves.
    """
    text = os.fsencode(path).decode("utf-8", "surrogateescape")
    if not any(ch == "\\" or ch == "\x00" or "\udc80" <= ch <= "\udcff" for ch in text):
        return text
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\x00" or "\udc80" <= ch <= "\udcff":
            out.append(f"\\x{ord(ch) & 0xFF:02x}")
        else:
            out.append(ch)
    return "".join(out)


@dataclass(frozen=True)
class Registered:
    """An episode registered for a discovered path (one content version of it)."""

    episode_id: int
    size_bytes: int
    path: str  # as the catalog stores it
    version: int
    state: str
    sha256: str
    source_state: dict[str, Any] | None

    @property
    def alias(self) -> str:
        """How logs and work items name this version: the path, then its version past the first."""
        return self.path if self.version == 1 else f"{self.path} [version {self.version}]"


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
        """Every file of the batch; files provably unchanged since their content was registered are marked
        for skipping (the runner skips them if their ingest is final). Everything else is landed again and
        identified by its hash."""
        from pipeline.store import identifies_content, source_state

        fs, root = self.source
        paths = [i.source_path or i.key for i in batch_items]
        known = registered_episodes(self.ctx.engine, self.vendor_id, paths)
        out = []
        for item, path in zip(batch_items, paths, strict=True):
            hit = None
            if path in known:
                try:
                    now = source_state(fs, f"{root}/{path}")
                except OSError:
                    now = None  # gone or unreadable: landing says why
                if now is not None and identifies_content(now):
                    hit = next((r for r in known[path] if r.source_state == now), None)
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

        from pipeline.beneath import SourceRefusedError
        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.sources import (
            claim_original,
            ensure_episode,
            record_passed_over,
            register_blob,
            register_source_file,
            set_episode_state,
        )

        fs, root = self.source
        path = item.source_path or item.key
        alias = catalog_path(path)  # also what is logged: a name may hold undecodable bytes
        try:
            landed = self.ctx.store.land(fs, f"{root}/{path}", root=root)
        except SourceRefusedError as exc:
            log.warning("%s: refused %r: %s", self.vendor.name, alias, exc.detail)
            with session_scope(make_session_factory(self.ctx.engine)) as session:
                record_passed_over(
                    session, vendor_id=self.vendor_id, path=alias, why=exc.why, detail=exc.detail
                )
            if exc.why in (PassOverReason.NOT_REGULAR, PassOverReason.UNREADABLE):
                return StepResult(StepStatus.SKIPPED, detail=exc.detail)  # as discovery would have
            return StepResult.rejected(ReasonCode(exc.reason), exc.detail)
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
            source = register_source_file(
                session,
                vendor_id=self.vendor_id,
                path=alias,
                blob_id=blob_id,
                source_state=landed.source_state,
            )
            if source.created and source.version > 1:
                log.warning(
                    "%s changed since it was registered: new content is version %d", alias, source.version
                )
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
                    step=self.name,
                    config_hash=self.config_hash,
                )
        log.debug("ingested %s -> %s (episode %s)", alias, landed.sha256, episode.id)
        return StepResult.succeeded(
            episode_id=episode.id,
            sha256=landed.sha256,
            alias=alias,
            version=source.version,
            new_object=landed.created,
            duplicate_of=original,
        )


def registered_episodes(engine: Engine, vendor_id: int, paths: Sequence[str]) -> dict[str, list[Registered]]:
    """For each given path already registered for a vendor: its episodes, one per version, first first."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Blob, Episode, SourceFile

    if not paths:
        return {}
    by_text = {catalog_path(p): p for p in paths}
    with session_scope(make_session_factory(engine)) as session:
        rows = session.execute(
            select(
                SourceFile.path,
                SourceFile.version,
                SourceFile.source_state,
                Episode.id,
                Episode.state,
                Blob.size_bytes,
                Blob.sha256,
            )
            .join(Episode, Episode.source_file_id == SourceFile.id)
            .join(Blob, Blob.id == SourceFile.blob_id)
            .where(SourceFile.vendor_id == vendor_id, SourceFile.path.in_(list(by_text)))
            .order_by(SourceFile.path, SourceFile.version)
        ).all()
    out: dict[str, list[Registered]] = {}
    for row in rows:
        out.setdefault(by_text[row.path], []).append(
            Registered(row.id, row.size_bytes, row.path, row.version, row.state, row.sha256, row.source_state)
        )
    return out
