"""The ``transcode`` step: accepted inputs into training-shaped outputs in the derived store.

Robot logs become one MCAP per episode (:func:`pipeline.transcode.transcode_episode`), vendor videos a set
of clips (:func:`pipeline.transcode.clips.transform_video`), under ``derived/transcode/<config hash>/
<episode id>/``: a function of (input, config hash), so a rerun under the same config finds its output and
only (re)records it. Every file is written to the store's ``tmp/`` area, verified and published by rename;
only then is it recorded as an artifact whose input is the source blob. An input the transcode refuses
(:class:`~pipeline.errors.InputError`) is quarantined with the reason: it has no output to train on. Camera
encodes run in a pool of
``resources.cpus`` processes (a :class:`pipeline.processes.WorkerPool`) made once per worker in
:meth:`TranscodeStep.setup`.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.enums import ArtifactKind, FileState, SourceKind, StepName
from pipeline.errors import InputError
from pipeline.steps.base import Step, StepContext, StepResult, WorkItem

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pipeline.config import VendorConfig
    from pipeline.store import Store

log = logging.getLogger(__name__)

#: Episode states the transcode (and the post-gate) work on: what the pre-gate let through.
USABLE_STATES = (FileState.ACCEPTED, FileState.ACCEPTED_WITH_FLAGS)
#: A robot episode has three cameras: more encoder processes than cameras would sit idle.
MAX_ENCODER_PROCESSES = 8


@dataclass(frozen=True)
class EpisodeSource:
    """What the transcode needs to know about an episode from the catalog."""

    episode_id: int
    kind: SourceKind
    sha256: str
    blob_id: int
    calibration_key: str | None


def usable_items(engine: Engine, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
    """The batch items whose episode is accepted or accepted with flags (read from the catalog)."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Episode

    ids = [i.episode_id for i in batch_items if i.episode_id is not None]
    if not ids:
        return []
    with session_scope(make_session_factory(engine)) as session:
        usable = set(
            session.execute(
                select(Episode.id).where(
                    Episode.id.in_(ids), Episode.state.in_([s.value for s in USABLE_STATES])
                )
            ).scalars()
        )
    return [i for i in batch_items if i.episode_id in usable]


def episode_source(engine: Engine, episode_id: int) -> EpisodeSource:
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Blob, Calibration, Episode

    with session_scope(make_session_factory(engine)) as session:
        row = session.execute(
            select(Episode.kind, Blob.sha256, Blob.id.label("blob_id"), Calibration.calibration_key)
            .join(Blob, Blob.id == Episode.blob_id)
            .outerjoin(Calibration, Calibration.id == Episode.calibration_id)
            .where(Episode.id == episode_id)
        ).one()
    return EpisodeSource(episode_id, SourceKind(row.kind), row.sha256, row.blob_id, row.calibration_key)


def output_key(config_hash: str, episode_id: int) -> str:
    """The derived-store folder of one episode's transcode output."""
    return f"derived/{StepName.TRANSCODE.value}/{config_hash}/{episode_id}"


@contextmanager
def local_raw(store: Store, sha256: str) -> Iterator[Path]:
    """A local path to a raw object (PyAV and mcap need one); remote stores are copied to a temp file."""
    if store.local:
        yield store.local_raw_path(sha256)
        return
    with tempfile.TemporaryDirectory(prefix="sluice-transcode-") as tmp:
        target = Path(tmp) / sha256
        with store.open_raw(sha256) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)
        yield target


@contextmanager
def local_output(store: Store, key: str) -> Iterator[tuple[Path, Path]]:
    """``(output folder, staging folder)`` for writing ``key``: the store itself when local; otherwise a
    temp folder uploaded file by file afterwards (an object put is atomic per object)."""
    if store.local:
        yield Path(store.path(key)), Path(store.path("tmp"))
        return
    with tempfile.TemporaryDirectory(prefix="sluice-transcode-out-") as tmp:
        out, staging = Path(tmp) / "out", Path(tmp) / "staging"
        out.mkdir()
        yield out, staging
        for path in sorted(out.iterdir(), key=lambda p: p.suffix == ".json"):  # manifests last
            store.fs.put(str(path), store.path(f"{key}/{path.name}"))


class TranscodeStep(Step):
    """Transcode the accepted episodes of a batch."""

    name = StepName.TRANSCODE

    def __init__(self, vendor: VendorConfig, ctx: StepContext) -> None:
        super().__init__(vendor, ctx)
        self._executor: Executor | None = None

    def setup(self) -> None:
        from pipeline.processes import WorkerPool

        if self._processes > 1 and self._executor is None:
            # Clean spawned children (pipeline.processes): a worker may hold threads (database pool, Ray)
            # that fork would copy mid-operation, and the encoders must not depend on the Airflow task
            # process they run under.
            self._executor = WorkerPool(self._processes, name="transcode encoder")

    @property
    def _processes(self) -> int:
        """Encoder processes: the step's CPUs, at most :data:`MAX_ENCODER_PROCESSES`."""
        return min(int(self.resources.cpus), MAX_ENCODER_PROCESSES)

    def close(self) -> None:
        """Stop the encoder processes (the runner's workers end with their process anyway)."""
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None

    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        return usable_items(self.ctx.engine, batch_items)

    def process(self, item: WorkItem) -> StepResult:
        assert item.episode_id is not None
        source = episode_source(self.ctx.engine, item.episode_id)
        try:
            if source.kind is SourceKind.MCAP:
                return self._robot(source)
            return self._video(source)
        except InputError as exc:
            # An input the transcode refuses has no output to train on: it ends quarantined with the
            # reason, whatever that reason's severity at a gate; the runner records the rejected step.
            self._quarantine(source.episode_id, exc)
            raise

    def _quarantine(self, episode_id: int, exc: InputError) -> None:
        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.sources import set_episode_state

        with session_scope(make_session_factory(self.ctx.engine)) as session:
            set_episode_state(
                session,
                episode_id,
                FileState.QUARANTINED,
                reasons=[exc.reason],
                detail=f"transcode: {exc.detail}",
                merge_reasons=True,
                step=self.name,
                config_hash=self.config_hash,
            )

    def _robot(self, source: EpisodeSource) -> StepResult:
        from pipeline.transcode import Provenance, RobotTranscodeConfig, transcode_episode
        from pipeline.transcode.layout import EPISODE_FILE
        from pipeline.transcode.publish import sha256_file

        key = output_key(self.config_hash, source.episode_id)
        store = self.ctx.store
        final_key = f"{key}/{EPISODE_FILE}"
        if store.fs.exists(store.path(final_key)):
            # Published earlier (only verified files are ever renamed into place): record it again.
            with local_raw_output(store, final_key) as path:
                sha256, size = sha256_file(path)
        else:
            provenance = Provenance(
                source_sha256=source.sha256,
                config_hash=self.config_hash,
                code_version=self.ctx.code_version,
                calibration_id=source.calibration_key,
            )
            config = RobotTranscodeConfig.from_vendor(self.vendor)
            with local_raw(store, source.sha256) as raw, local_output(store, key) as (out_dir, staging):
                result = transcode_episode(
                    raw,
                    out_dir / EPISODE_FILE,
                    config,
                    provenance,
                    executor=self._executor,
                    executor_workers=self._processes if self._executor is not None else None,
                    staging_dir=staging,
                )
            sha256, size = result.sha256, result.size_bytes
        artifact_id = self._record(
            source, ArtifactKind.TRANSCODED_EPISODE, store.url(final_key), sha256, size
        )
        return StepResult.succeeded(
            episode_id=source.episode_id, uri=store.url(final_key), sha256=sha256, artifact_ids=[artifact_id]
        )

    def _video(self, source: EpisodeSource) -> StepResult:
        from pipeline.transcode.clips import CLIPS_MANIFEST, read_manifest, transform_video

        key = output_key(self.config_hash, source.episode_id)
        store = self.ctx.store
        if store.fs.exists(store.path(f"{key}/{CLIPS_MANIFEST}")):
            with local_raw_output(store, f"{key}/{CLIPS_MANIFEST}") as path:
                clips = [
                    (c["file"], c["sha256"], c["size_bytes"]) for c in read_manifest(path.parent)["clips"]
                ]
        else:
            with local_raw(store, source.sha256) as raw, local_output(store, key) as (out_dir, staging):
                try:
                    outputs = transform_video(raw, out_dir, self.vendor.transcode, staging_dir=staging)
                except InputError as exc:
                    # its messages name the file they read, here the raw object (its sha256): the
                    # catalogue row already names the vendor's file
                    exc.detail = exc.detail.removeprefix(f"{raw.name}: ")
                    raise
            clips = [(o.file, o.sha256, o.size_bytes) for o in outputs]
        ids = [
            self._record(source, ArtifactKind.CLIP, store.url(f"{key}/{f}"), sha, size)
            for f, sha, size in clips
        ]
        return StepResult.succeeded(
            episode_id=source.episode_id, uri=store.url(key), clips=len(ids), artifact_ids=ids
        )

    def _record(self, source: EpisodeSource, kind: ArtifactKind, uri: str, sha256: str, size: int) -> int:
        from pipeline.catalog import make_session_factory, session_scope
        from pipeline.catalog.outputs import record_artifact

        with session_scope(make_session_factory(self.ctx.engine)) as session:
            return record_artifact(
                session,
                kind=kind,
                uri=uri,
                sha256=sha256,
                size_bytes=size,
                step=self.name,
                config_hash=self.config_hash,
                code_version=self.ctx.code_version,
                episode_id=source.episode_id,
                input_blob_ids=[source.blob_id],
            )


@contextmanager
def local_raw_output(store: Store, key: str) -> Iterator[Path]:
    """A local path to a derived object (downloaded beside its siblings' names for remote stores)."""
    if store.local:
        yield Path(store.path(key))
        return
    with tempfile.TemporaryDirectory(prefix="sluice-derived-") as tmp:
        folder = key.rsplit("/", 1)[0]
        for remote in store.fs.ls(store.path(folder), detail=False):
            store.fs.get(remote, str(Path(tmp) / Path(remote).name))
        yield Path(tmp) / Path(key).name
