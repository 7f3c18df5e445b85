"""The cameras of a robot log encoded beside the read of the rest of it.

In this process (no executor) the log is read whole, then the cameras encode one after the other. With an
encoder pool the cameras encode in its processes while this one reads the state and action streams and
resamples them; when the log's summary says which cameras it holds, the encodes start before the log is
read, each camera's pictures handed to its encoder through a spool file as they are read
(:mod:`pipeline.families.spool`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pipeline.enums import ReasonCode
from pipeline.families.spool import SpooledFrames, SpoolWriter
from pipeline.transcode.cameras import (
    CameraJob,
    EncodedCamera,
    deal,
    encode_camera,
    encode_cameras,
    prefetch_pays,
)
from pipeline.transcode.errors import TranscodeInputError
from pipeline.transcode.profiles import EncoderSettings
from pipeline.transcode.resample import Resampled, clean_series, grid, resample
from pipeline.transcode.source import NotStreamableError, PlannedCamera, SourceEpisode, SourceReader

if TYPE_CHECKING:
    from pipeline.transcode.robot import RobotTranscodeConfig

log = logging.getLogger(__name__)

#: Picture spools live in ``<temp folder>/sluice-spool-<host>-<pid>-<random>/``: the process id lets a later
#: transcode on the same host remove the folder of one that was killed (:func:`_remove_orphaned_spools`);
#: the host (a hash of its name) keeps it from judging the process ids of another machine or container that
#: shares the temp folder.
SPOOL_FOLDER_PREFIX = "sluice-spool-"


def _spool_folder_prefix(pid: int | None = None) -> str:
    host = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
    return f"{SPOOL_FOLDER_PREFIX}{host}-" + ("" if pid is None else f"{pid}-")


class EncodedEpisode(NamedTuple):
    """The source episode as read, its cameras encoded (in the order of ``episode.cameras``), and its state
    and action streams resampled."""

    episode: SourceEpisode
    cameras: list[EncodedCamera]
    resampled: list[Resampled]


def encode_episode(
    source: Path,
    config: RobotTranscodeConfig,
    settings: EncoderSettings,
    *,
    executor: Executor | None = None,
    executor_workers: int | None = None,
) -> EncodedEpisode:
    """Read ``source``, encode its cameras per ``settings`` (on ``executor`` when given, see
    :func:`pipeline.transcode.transcode_episode`) and resample its state and actions."""
    if executor is not None:
        return _encode_in_pool(source, config, settings, executor, executor_workers)
    reader = SourceReader(source, config.contract, config.truth)
    # in this process the cameras encode one after the other on the task's one core
    jobs = [CameraJob(c.name, c.frames, c.rate, settings) for c in reader.cameras()]
    episode = reader.episode()  # all of the log read before the encodes, which take longest
    encoded = [encode_camera(job) for job in jobs]
    return EncodedEpisode(episode, encoded, resample_episode(episode, config.options.resample_rate_hz))


def _encode_in_pool(
    source: Path,
    config: RobotTranscodeConfig,
    settings: EncoderSettings,
    executor: Executor,
    workers: int | None,
) -> EncodedEpisode:
    """The cameras encoded on ``executor`` while this process reads the log and resamples the state and
    actions.

    When the log's summary says which cameras it holds (:meth:`SourceReader.plan`), the encodes start
    before the log is read: each camera's pictures go to its encoder process through a spool file as
    they are read (:mod:`pipeline.families.spool`), nothing is pickled, and this process holds none of
    them. Otherwise, or when the pictures turn out not to be in the order they are encoded in, the log is
    read first and the pictures are sent with the encodes.
    """
    reader = SourceReader(source, config.contract, config.truth)
    plan = reader.plan()
    if plan:
        try:
            return _encode_spooled(reader, plan, config, settings, executor, workers)
        except NotStreamableError as why:
            log.info("%s: %s; the log is read before the cameras encode", source, why)
            reader = SourceReader(source, config.contract, config.truth)
    sources = reader.cameras()
    cores = workers or len(sources)
    prefetch = prefetch_pays(len(sources), cores)
    jobs = [CameraJob(c.name, c.frames, c.rate, settings, prefetch) for c in sources]
    hands = deal(range(len(jobs)), cores)
    futures = _submit(executor, jobs, hands)
    return _gather(reader, hands, futures, config.options.resample_rate_hz)


def _encode_spooled(
    reader: SourceReader,
    plan: list[PlannedCamera],
    config: RobotTranscodeConfig,
    settings: EncoderSettings,
    executor: Executor,
    workers: int | None,
) -> EncodedEpisode:
    cores = workers or len(plan)
    prefetch = prefetch_pays(len(plan), cores)
    hands = deal(range(len(plan)), cores)
    _remove_orphaned_spools(Path(tempfile.gettempdir()))
    try:
        # in the temp folder, not beside the output: a store's staging area may be a network file system
        folder_context = tempfile.TemporaryDirectory(
            prefix=_spool_folder_prefix(os.getpid()), ignore_cleanup_errors=True
        )
    except OSError as exc:
        raise NotStreamableError(f"no folder for picture spools ({exc})") from None
    with folder_context as folder, contextlib.ExitStack() as open_spools:
        try:
            spools = {
                p.topic: open_spools.enter_context(SpoolWriter(Path(folder) / f"{k}.spool"))
                for k, p in enumerate(plan)
            }
        except OSError as exc:
            raise NotStreamableError(f"a picture spool cannot be made ({exc})") from None
        pid = os.getpid()
        jobs = [
            CameraJob(
                p.name, SpooledFrames(p.kind, str(spools[p.topic].path), pid), p.rate, settings, prefetch
            )
            for p in plan
        ]
        submitting = _Submitting(executor, jobs, hands)
        try:
            found = reader.cameras(spools)
            if [(c.topic, c.frames.kind) for c in found] != [(p.topic, p.kind) for p in plan]:
                raise NotStreamableError("the cameras with pictures are not those its summary lists")
            futures = submitting.futures()
        except BaseException:
            # withdrawn first: an encode waiting for pictures ends at once (also one that a synchronous
            # executor runs in the submitting thread), then the futures are cancelled
            shutil.rmtree(folder, ignore_errors=True)
            _cancel(submitting.futures(raise_error=False))
            raise
        open_spools.close()
        # the spools are removed once every encode has ended (or the episode has failed)
        return _gather(reader, hands, futures, config.options.resample_rate_hz)


def _remove_orphaned_spools(temp: Path) -> None:
    """Remove the spool folders of transcodes on this host killed before they could (the process id in
    a folder's name no longer runs; a folder of a live process, or of another user's, is left)."""
    prefix = _spool_folder_prefix()
    for folder in temp.glob(f"{prefix}*-*"):
        pid = folder.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            log.info("removing %s, left by a transcode that no longer runs", folder)
            shutil.rmtree(folder, ignore_errors=True)
        except (PermissionError, OverflowError):
            continue


class _Submitting:
    """The hands' encodes submitted from a thread of its own: an executor that runs a task in the caller
    (a synchronous one) would otherwise wait in ``submit`` for pictures its caller has not read yet."""

    def __init__(self, executor: Executor, jobs: Sequence[CameraJob], hands: Sequence[Sequence[int]]) -> None:
        self._futures: list[Future[list[EncodedCamera]]] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._submit, args=(executor, jobs, hands), name="submit-encodes", daemon=True
        )
        self._thread.start()

    def _submit(self, executor: Executor, jobs: Sequence[CameraJob], hands: Sequence[Sequence[int]]) -> None:
        try:
            self._futures += _submit(executor, jobs, hands)
        except BaseException as exc:  # raised in the caller's thread by futures()
            self._error = exc

    def futures(self, *, raise_error: bool = True) -> list[Future[list[EncodedCamera]]]:
        """The futures once every hand is submitted (what submitting raised is raised here)."""
        self._thread.join()
        if self._error is not None and raise_error:
            raise self._error
        return self._futures


def _submit(
    executor: Executor, jobs: Sequence[CameraJob], hands: Sequence[Sequence[int]]
) -> list[Future[list[EncodedCamera]]]:
    futures: list[Future[list[EncodedCamera]]] = []
    for hand in hands:
        futures.append(executor.submit(encode_cameras, [jobs[k] for k in hand]))
    return futures


def _cancel(futures: Sequence[Future[Any]]) -> None:
    """The episode has failed: free the shared pool for the next one (an encode already running ends on
    its own)."""
    for future in futures:
        future.cancel()


def _gather(
    reader: SourceReader,
    hands: Sequence[Sequence[int]],
    futures: Sequence[Future[list[EncodedCamera]]],
    rate_hz: float | None,
) -> EncodedEpisode:
    """While the cameras encode: the rest of the log read, the state and actions resampled; then the
    encoded cameras in the order of the jobs."""
    try:
        episode = reader.episode()
        resampled = resample_episode(episode, rate_hz)
        done: dict[int, EncodedCamera] = {}
        for hand, future in zip(hands, futures, strict=True):
            done.update(zip(hand, future.result(), strict=True))
    except BaseException:
        _cancel(futures)
        raise
    return EncodedEpisode(episode, [done[k] for k in range(len(done))], resampled)


def resample_episode(episode: SourceEpisode, rate_hz: float | None) -> list[Resampled]:
    """The episode's state and action streams, cleaned and resampled onto one grid at ``rate_hz`` (none
    when it is None)."""
    series = [clean_series(s) for s in (*episode.state, *episode.actions)]
    if rate_hz is None or not series:
        return []
    instants = grid(series, rate_hz)
    if len(instants) < 2:
        raise TranscodeInputError(
            ReasonCode.RESAMPLE_ERROR,
            f"state and action streams overlap for less than two {rate_hz:g} Hz periods",
        )
    return [resample(s, instants) for s in series]
