"""Where an episode's bytes are: its latest transcoded output when there is one, else its raw input.

Shared by the annotate step, the shard writer's lineage and the LeRobot export.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.enums import SourceKind

#: A clip's file name, as the transcode writes it (``clip_<NNN>.mp4``).
_CLIP_FILE = re.compile(r"clip_([0-9]+)\.[A-Za-z0-9]+$")

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


@dataclass(frozen=True)
class EpisodeInputRef:
    """An episode and the file annotators and exports read for it."""

    episode_id: int
    kind: SourceKind
    vendor: str
    task: str | None
    blob_id: int
    source_sha256: str  # of the raw input (the episode's identity)
    raw_uri: str
    artifact_id: int | None  # latest transcoded output, when there is one
    artifact_uri: str | None
    artifact_sha256: str | None

    @property
    def uri(self) -> str:
        """What to read: the transcoded output if any, else the raw input."""
        return self.artifact_uri or self.raw_uri

    @property
    def sha256(self) -> str:
        return self.artifact_sha256 or self.source_sha256


def episode_inputs(engine: Engine, episode_ids: list[int]) -> dict[int, EpisodeInputRef]:
    """The input of each given episode (episodes the catalog does not know are left out)."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Artifact, Blob, Episode, Vendor
    from pipeline.enums import ArtifactKind

    if not episode_ids:
        return {}
    with session_scope(make_session_factory(engine)) as session:
        rows = session.execute(
            select(
                Episode.id,
                Episode.kind,
                Episode.task,
                Episode.blob_id,
                Blob.sha256,
                Blob.raw_uri,
                Vendor.name,
            )
            .join(Blob, Blob.id == Episode.blob_id)
            .join(Vendor, Vendor.id == Episode.vendor_id)
            .where(Episode.id.in_(episode_ids))
        ).all()
        artifacts = session.execute(
            select(Artifact.episode_id, Artifact.id, Artifact.uri, Artifact.sha256)
            .where(
                Artifact.episode_id.in_(episode_ids),
                Artifact.kind == ArtifactKind.TRANSCODED_EPISODE.value,
            )
            .order_by(Artifact.episode_id, Artifact.created_at, Artifact.id)
        ).all()
    latest = {a.episode_id: a for a in artifacts}  # ordered: the last one per episode wins
    out = {}
    for r in rows:
        a = latest.get(r.id)
        out[r.id] = EpisodeInputRef(
            episode_id=r.id,
            kind=SourceKind(r.kind),
            vendor=r.name,
            task=r.task,
            blob_id=r.blob_id,
            source_sha256=r.sha256,
            raw_uri=r.raw_uri,
            artifact_id=None if a is None else a.id,
            artifact_uri=None if a is None else a.uri,
            artifact_sha256=None if a is None else a.sha256,
        )
    return out


@dataclass(frozen=True)
class ClipRef:
    """One clip of a video episode's latest transcode."""

    artifact_id: int
    clip_index: int
    uri: str
    sha256: str


def episode_clips(engine: Engine, episode_id: int) -> list[ClipRef]:
    """The clips of a video episode's latest transcode (the config hash of its newest clip), in clip order:
    the same set the warehouse's ``episode_clips`` view shows."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Artifact
    from pipeline.enums import ArtifactKind

    with session_scope(make_session_factory(engine)) as session:
        rows = session.execute(
            select(Artifact.id, Artifact.uri, Artifact.sha256, Artifact.config_hash)
            .where(Artifact.episode_id == episode_id, Artifact.kind == ArtifactKind.CLIP.value)
            .order_by(Artifact.created_at, Artifact.id)
        ).all()
    if not rows:
        return []
    latest = rows[-1].config_hash
    clips = []
    for r in rows:
        match = _CLIP_FILE.search(r.uri)
        if r.config_hash == latest and match is not None:
            clips.append(ClipRef(r.id, int(match.group(1)), r.uri, r.sha256))
    return sorted(clips, key=lambda c: c.clip_index)


@contextlib.contextmanager
def local_file(uri: str, scratch: Path | None = None) -> Iterator[Path]:
    """A local path for ``uri``: the file itself when it is local, else a temporary download."""
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    fs, path = fsspec.core.url_to_fs(uri)
    if isinstance(fs, LocalFileSystem):
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        local = Path(tmp) / Path(path).name
        with fs.open(path, "rb") as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)
        yield local
