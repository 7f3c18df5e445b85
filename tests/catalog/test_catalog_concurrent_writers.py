"""16 writers, each on its own connection as the ingest role, register overlapping sets of 300 files."""

from __future__ import annotations

import hashlib
import random
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from pipeline.catalog import repo
from pipeline.catalog.roles import RoleUrls
from pipeline.enums import FileState, SourceKind

pytestmark = pytest.mark.integration

N_WRITERS = 16
N_FILES = 300
#: Paths i and i + N_CONTENTS carry the same bytes: 60 exact duplicates under another name.
N_CONTENTS = 240
#: Writers registering each file at once.
OVERLAP = 4


@dataclass(frozen=True)
class Registered:
    vendor_id: int
    blob_id: int
    source_file_id: int
    created: bool
    episode_id: int


def _content(i: int) -> bytes:
    return f"synthetic log {i % N_CONTENTS}".encode() * 7


def _path(i: int) -> str:
    return f"drop/2025-11-29/ep_{i:03d}.mcap"


def _writers_of(i: int) -> set[int]:
    """The OVERLAP writers of file i: a window sliding by 7 per file, so shares overlap unevenly."""
    return {(7 * i + k) % N_WRITERS for k in range(OVERLAP)}


def _share(writer: int) -> list[int]:
    """This writer's files, in a writer-specific order."""
    files = [i for i in range(N_FILES) if writer in _writers_of(i)]
    random.Random(writer).shuffle(files)
    return files


def _run_writer(url: str, writer: int, start: threading.Barrier) -> dict[str, Registered]:
    engine = repo.make_engine(url, pool_size=1)
    factory = repo.make_session_factory(engine)
    seen: dict[str, Registered] = {}
    try:
        start.wait()
        for i in _share(writer):
            data = _content(i)
            sha256 = hashlib.sha256(data).hexdigest()
            # One transaction per file, as ingest does: a retry redoes the whole file.
            with repo.session_scope(factory) as session:
                vendor_id = repo.upsert_vendor(
                    session, name="acme", kind=SourceKind.MCAP, config_hash="cfg1", config={"name": "acme"}
                )
                blob_id = repo.register_blob(
                    session, sha256=sha256, size_bytes=len(data), raw_uri=f"raw/{sha256}"
                )
                source = repo.register_source_file(
                    session, vendor_id=vendor_id, path=_path(i), blob_id=blob_id
                )
                episode = repo.ensure_episode(
                    session, vendor_id=vendor_id, source_file_id=source.id, blob_id=blob_id, kind="mcap"
                )
                original = repo.claim_original(session, blob_id=blob_id, episode_id=episode.id)
                if original is not None:
                    repo.set_episode_state(session, episode.id, FileState.DUPLICATE, duplicate_of_id=original)
            seen[_path(i)] = Registered(vendor_id, blob_id, source.id, source.created, episode.id)
    finally:
        engine.dispose()
    return seen


def test_sixteen_concurrent_writers_leave_no_duplicates(
    role_urls: RoleUrls, migrated_database_url: str
) -> None:
    start = threading.Barrier(N_WRITERS)
    with ThreadPoolExecutor(max_workers=N_WRITERS) as pool:
        futures = [pool.submit(_run_writer, role_urls.writer_url, w, start) for w in range(N_WRITERS)]
        results = [f.result(timeout=300) for f in futures]

    by_path: dict[str, list[Registered]] = defaultdict(list)
    for seen in results:
        for path, registered in seen.items():
            by_path[path].append(registered)
    assert len(by_path) == N_FILES
    assert {len(r) for r in by_path.values()} == {OVERLAP}

    # Every writer got the same ids for the same file, and exactly one of them created its alias row.
    for path, registrations in by_path.items():
        ids = {(r.vendor_id, r.blob_id, r.source_file_id, r.episode_id) for r in registrations}
        assert len(ids) == 1, path
        assert sum(r.created for r in registrations) == 1, path
    # Paths with the same bytes share one blob; different bytes never do.
    blob_of = {path: regs[0].blob_id for path, regs in by_path.items()}
    for i in range(N_FILES - N_CONTENTS):
        assert blob_of[_path(i)] == blob_of[_path(i + N_CONTENTS)]
    assert len(set(blob_of.values())) == N_CONTENTS

    engine = sa.create_engine(migrated_database_url)
    with engine.connect() as conn:
        counts = conn.execute(
            sa.text(
                "SELECT (SELECT count(*) FROM vendors), (SELECT count(*) FROM blobs), "
                "(SELECT count(DISTINCT sha256) FROM blobs), (SELECT count(*) FROM source_files), "
                "(SELECT count(DISTINCT (vendor_id, path)) FROM source_files), "
                "(SELECT count(*) FROM episodes)"
            )
        ).one()
        recorded = dict(conn.execute(sa.text("SELECT path, blob_id FROM source_files")).all())
        # Per content: one original, every other episode a duplicate of it.
        per_blob = conn.execute(
            sa.text(
                "SELECT blob_id, count(*) FILTER (WHERE state <> 'duplicate'), "
                "count(DISTINCT duplicate_of_id), bool_and(state <> 'duplicate' OR duplicate_of_id = "
                "(SELECT min(o.id) FROM episodes o WHERE o.blob_id = e.blob_id AND o.state <> 'duplicate')) "
                "FROM episodes e GROUP BY blob_id"
            )
        ).all()
    engine.dispose()
    assert tuple(counts) == (1, N_CONTENTS, N_CONTENTS, N_FILES, N_FILES, N_FILES)
    assert recorded == blob_of
    assert len(per_blob) == N_CONTENTS
    assert all(originals == 1 and pointers_ok for _, originals, _, pointers_ok in per_blob)
    assert sum(n_targets for _, _, n_targets, _ in per_blob) == N_FILES - N_CONTENTS
