"""A synthetic catalog filled through the catalog's own upsert functions (no media: rows only).

Shared by the warehouse and dataset tests: both conftests import the ``catalog_engine`` and ``catalog``
fixtures from here (``tests/datasets/conftest.py`` puts this folder on ``sys.path`` first).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.catalog import repo
from pipeline.catalog.engine import make_engine
from pipeline.enums import FileState

SECOND_NS = 1_000_000_000
#: Log time of the first synthetic episode (2024-01-01T00:00:00Z).
EPOCH_NS = 1_704_067_200 * SECOND_NS


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class SyntheticCatalog:
    """Adds vendors and fully described episodes to a migrated catalog, one transaction per call."""

    engine: Engine
    _serial: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _vendors: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.factory = repo.make_session_factory(self.engine)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with repo.session_scope(self.factory) as session:
            yield session

    def vendor(self, session: Session, name: str, kind: str = "mcap") -> int:
        if name not in self._vendors:
            self._vendors[name] = repo.upsert_vendor(
                session, name=name, kind=kind, config_hash=f"cfg-{name}", config={"name": name}
            )
        return self._vendors[name]

    def video_episode(
        self,
        session: Session,
        *,
        vendor: str = "northwind_video",
        session_id: str | None = "v0",
        task: str | None = "pick_place",
        duration_s: float = 3.0,
        state: FileState = FileState.ACCEPTED,
    ) -> tuple[int, int]:
        """One vendor video as ingest and the pre-gate record it (its clock runs from 0 to its duration);
        returns (episode id, blob id). Its clips are recorded with :meth:`clips`."""
        n = next(self._serial)
        vendor_id = self.vendor(session, vendor, kind="video")
        blob_id = repo.register_blob(session, sha256=sha(f"raw-{n}"), size_bytes=1000 + n, raw_uri=f"raw/{n}")
        source = repo.register_source_file(
            session, vendor_id=vendor_id, path=f"drop/{n}.mp4", blob_id=blob_id
        )
        episode_id = repo.ensure_episode(
            session, vendor_id=vendor_id, source_file_id=source.id, blob_id=blob_id, kind="video",
            robot_id=None, session_id=session_id, task=task, start_time_ns=0,
            end_time_ns=int(duration_s * SECOND_NS),
        ).id  # fmt: skip
        repo.set_episode_state(session, episode_id, state)
        return episode_id, blob_id

    def clips(
        self,
        session: Session,
        episode_id: int,
        blob_id: int,
        clips: list[tuple[str, str, int]],
        config_hash: str,
    ) -> list[int]:
        """Record ``(uri, sha256, size_bytes)`` clips of a video episode as the transcode step does."""
        return [
            repo.record_artifact(
                session,
                kind="clip",
                uri=uri,
                sha256=digest,
                size_bytes=size,
                step="transcode",
                config_hash=config_hash,
                code_version="test",
                episode_id=episode_id,
                input_blob_ids=[blob_id],
            )
            for uri, digest, size in clips
        ]

    def episode(
        self,
        session: Session,
        *,
        vendor: str = "acme",
        session_id: str | None = "s0",
        robot_id: str | None = "r0",
        task: str | None = "pick_place",
        duration_s: int = 10,
        state: FileState = FileState.ACCEPTED,
        transcoded: bool = True,
        quality: float | None = 0.9,
        duplicate_of: int | None = None,
    ) -> int:
        """One episode with streams, a gate check, a quality annotation and (optionally) its transcode."""
        n = next(self._serial)
        vendor_id = self.vendor(session, vendor)
        blob_id = repo.register_blob(session, sha256=sha(f"raw-{n}"), size_bytes=1000 + n, raw_uri=f"raw/{n}")
        source = repo.register_source_file(
            session, vendor_id=vendor_id, path=f"drop/{n}.mcap", blob_id=blob_id
        )
        start = EPOCH_NS + n * 3600 * SECOND_NS
        episode_id = repo.ensure_episode(
            session, vendor_id=vendor_id, source_file_id=source.id, blob_id=blob_id, kind="mcap",
            robot_id=robot_id, session_id=session_id, task=task, start_time_ns=start,
            end_time_ns=start + duration_s * SECOND_NS,
        ).id  # fmt: skip
        if duplicate_of is not None:
            repo.set_episode_state(session, episode_id, FileState.DUPLICATE, duplicate_of_id=duplicate_of)
        else:
            repo.set_episode_state(session, episode_id, state)
        repo.record_streams(
            session,
            episode_id,
            [
                repo.StreamStats(topic="/cam/front", role="camera", message_count=30 * duration_s,
                                 rate_hz=30.0, gap_rate=0.01 * (n % 5), skew_p99_ns=-1000 * n),
                repo.StreamStats(topic="/joint_states", role="state", message_count=100 * duration_s,
                                 rate_hz=100.0, gap_rate=0.0),
            ],
        )  # fmt: skip
        repo.record_check(
            session, episode_id=episode_id, gate="quality_pre", check_name="gap_rate", config_hash="q1",
            status="passed" if n % 7 else "warned", observed={"gap_rate": 0.01 * (n % 5)},
        )  # fmt: skip
        if quality is not None:
            repo.record_annotation(
                session, episode_id=episode_id, annotator="quality", annotator_version="1",
                key="quality_sync", value=quality,
            )  # fmt: skip
        if transcoded:
            uri = f"file:///store/derived/transcode/t1/{episode_id}/episode.mcap"
            repo.record_artifact(
                session, kind="transcoded_episode", uri=uri, sha256=sha(uri), size_bytes=500 + n,
                step="transcode", config_hash="t1", code_version="test", episode_id=episode_id,
                input_blob_ids=[blob_id],
            )  # fmt: skip
        return episode_id


@pytest.fixture
def catalog_engine(migrated_database_url: str) -> Iterator[Engine]:
    """An engine on the migrated test catalog, disposed after the test."""
    engine = make_engine(migrated_database_url, pool_size=2)
    yield engine
    engine.dispose()


@pytest.fixture
def catalog(catalog_engine: Engine) -> SyntheticCatalog:
    """A :class:`SyntheticCatalog` over ``catalog_engine``."""
    return SyntheticCatalog(catalog_engine)
