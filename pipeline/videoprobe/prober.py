"""Probe video files in a sandboxed worker process: the caller's side.

:class:`VideoProber` keeps one worker alive across files (starting Python and PyAV costs about a second,
far more than probing a short clip) and replaces it after a timeout, a crash or an out-of-memory. Cheap
refusals happen here, before any parser sees the bytes: outside the vendor root, not a regular file, zero
bytes, a container family that is not allowed (judged from the magic bytes, never from the name).
"""

from __future__ import annotations

import base64
import logging
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import ValidationError

from pipeline.enums import ReasonCode
from pipeline.videoprobe._process import WorkerProcess
from pipeline.videoprobe.config import VideoProbeLimits
from pipeline.videoprobe.errors import ProbeTargetUnreadableError, ProbeWorkerError, display_path
from pipeline.videoprobe.findings import derive_findings
from pipeline.videoprobe.model import DecoderInfo, ProbeTiming, VideoFinding, VideoProbe
from pipeline.videoprobe.sniff import SNIFF_BYTES, describe_head, sniff_container

logger = logging.getLogger(__name__)

_MEMORY_HINTS = ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc", "ENOMEM")


class VideoProber:
    """Probes video files one at a time in a sandboxed, reusable worker process. Not thread-safe.

    Use as a context manager (or call :meth:`close`) so the worker ends with its owner::

        with VideoProber(limits) as prober:
            for path in paths:
                probe = prober.probe(path, root=vendor_root)
    """

    def __init__(self, limits: VideoProbeLimits | None = None, *, python: str | None = None) -> None:
        self.limits = limits or VideoProbeLimits()
        self._python = python or sys.executable
        self._worker: WorkerProcess | None = None

    def __enter__(self) -> VideoProber:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the worker (it holds no state worth keeping)."""
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def probe(
        self, path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None
    ) -> VideoProbe:
        """Measure one file and derive its findings; bad input never raises, it becomes findings.

        ``root`` is the vendor root: a path that resolves (symlinks followed) outside it is refused unread.
        Raises :class:`ProbeTargetUnreadableError` when the file is missing or unreadable and
        :class:`ProbeWorkerError` when the worker cannot be started or breaks the protocol.
        """
        started = time.perf_counter()
        path = Path(path)
        base: dict[str, Any] = {"path": display_path(path)}
        refusal = self._refusal(path, root, base)
        if refusal is not None:
            return self._finish(VideoProbe(**base, findings=[refusal]), started, None, None)
        worker, start_s = self._ensure_worker()
        decoder = DecoderInfo(**worker.decoder)
        raw = self._run(worker, path, base["sniffed_container"])
        worker_s = raw.pop("worker_s", None)
        stopped = raw.pop("stopped", None)
        decoder = decoder.model_copy(update={"decoder": raw.pop("decoder_name", None)})
        try:
            probe = VideoProbe.model_validate({**raw, **base, "decoder": decoder})
        except ValidationError as exc:
            raise ProbeWorkerError(f"answered a result that is not a VideoProbe: {exc}") from None
        findings = [stopped] if stopped is not None else derive_findings(probe, self.limits)
        probe = probe.model_copy(update={"findings": findings})
        return self._finish(probe, started + start_s, worker_s, start_s or None)

    # -- steps ------------------------------------------------------------------------------------------

    def _refusal(
        self, path: Path, root: str | os.PathLike[str] | None, base: dict[str, Any]
    ) -> VideoFinding | None:
        """A finding when the file must not reach the parser; fills ``base`` with what was learnt."""
        if root is not None:
            real_root = Path(root).resolve()
            try:
                real = path.resolve()
            except (OSError, RuntimeError) as exc:  # a symlink loop cannot be shown to stay inside
                return VideoFinding.of(ReasonCode.OUTSIDE_VENDOR_ROOT, f"cannot be resolved: {exc}")
            if not real.is_relative_to(real_root):
                return VideoFinding.of(
                    ReasonCode.OUTSIDE_VENDOR_ROOT,
                    f"resolves to {display_path(real)!r}, outside "
                    f"the vendor root {display_path(real_root)!r}",
                )
        try:
            info = path.stat()
        except OSError as exc:
            raise ProbeTargetUnreadableError(path, exc.strerror or str(exc)) from None
        if not stat.S_ISREG(info.st_mode):
            kind = (
                "directory"
                if stat.S_ISDIR(info.st_mode)
                else "FIFO"
                if stat.S_ISFIFO(info.st_mode)
                else "special file"
            )
            return VideoFinding.of(ReasonCode.DISALLOWED_CONTAINER, f"not a regular file but a {kind}")
        base["size_bytes"] = info.st_size
        if info.st_size == 0:
            return VideoFinding.of(ReasonCode.ZERO_BYTES, "the file is empty (0 bytes)")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                head = os.read(fd, SNIFF_BYTES)
            finally:
                os.close(fd)
        except OSError as exc:
            raise ProbeTargetUnreadableError(path, exc.strerror or str(exc)) from None
        family = sniff_container(head)
        allowed = ", ".join(self.limits.allowed_containers)
        if family is None:
            return VideoFinding.of(
                ReasonCode.DISALLOWED_CONTAINER, f"{describe_head(head)}; allowed containers: {allowed}"
            )
        if family not in self.limits.allowed_containers:
            return VideoFinding.of(
                ReasonCode.DISALLOWED_CONTAINER, f"container {family!r} is not allowed; allowed: {allowed}"
            )
        base["sniffed_container"] = family
        return None

    def _run(self, worker: WorkerProcess, path: Path, family: str) -> dict[str, Any]:
        """The worker's measurements, or a ``stopped`` finding when it timed out or died."""
        request = {"path_b64": base64.b64encode(os.fsencode(path.absolute())).decode(), "family": family}
        try:
            worker.send(request)
            result = worker.receive(self.limits.timeout_s)
        except (EOFError, BrokenPipeError):
            return {"stopped": self._died(worker)}
        except ProbeWorkerError:
            self._worker = None
            worker.kill()
            raise
        if result is None:
            self._worker = None
            worker.kill()
            return {
                "stopped": VideoFinding.of(
                    ReasonCode.PROBE_TIMEOUT,
                    f"no result within timeout_s={self.limits.timeout_s:g}; worker killed",
                )
            }
        if "resource_error" in result:
            # The worker exits after answering; start a fresh one next time.
            self._worker = None
            worker.kill()
        return result

    def _died(self, worker: WorkerProcess) -> VideoFinding:
        self._worker = None
        code = worker.kill()
        tail = worker.stderr_text()
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        if any(hint in tail for hint in _MEMORY_HINTS) or code == -signal.SIGXCPU:
            return VideoFinding.of(
                ReasonCode.PROBE_RESOURCE_LIMIT,
                f"probe worker died ({how}) at its resource limits: {tail[-300:]}",
            )
        logger.warning("video probe worker died (%s): %s", how, tail)
        return VideoFinding.of(
            ReasonCode.DECODE_ERROR, f"probe worker crashed ({how}) on this input: {tail[-300:]}"
        )

    def _ensure_worker(self) -> tuple[WorkerProcess, float]:
        """The live worker and the seconds spent starting it now (0.0 when it was already running)."""
        if self._worker is not None and not self._worker.alive():
            self._worker.kill()
            self._worker = None
        if self._worker is not None:
            return self._worker, 0.0
        started = time.perf_counter()
        try:
            self._worker = WorkerProcess(self.limits, self._python)
        except (EOFError, OSError) as exc:
            raise ProbeWorkerError(f"could not start: {exc}") from exc
        return self._worker, time.perf_counter() - started

    @staticmethod
    def _finish(
        probe: VideoProbe, started: float, worker_s: float | None, start_s: float | None
    ) -> VideoProbe:
        probe_s = time.perf_counter() - started
        per_frame = probe_s * 1000 / probe.decoded_frames if probe.decoded_frames else None
        timing = ProbeTiming(
            probe_s=probe_s, worker_s=worker_s, worker_start_s=start_s, per_frame_ms=per_frame
        )
        return probe.model_copy(update={"probe_timing": timing})


def probe_video(
    path: str | os.PathLike[str],
    *,
    limits: VideoProbeLimits | None = None,
    root: str | os.PathLike[str] | None = None,
) -> VideoProbe:
    """Probe one file in a fresh sandboxed worker. For many files use :class:`VideoProber` or
    :func:`probe_videos`, which keep the worker between files."""
    with VideoProber(limits) as prober:
        return prober.probe(path, root=root)


def probe_videos(
    paths: Iterable[str | os.PathLike[str]],
    *,
    limits: VideoProbeLimits | None = None,
    root: str | os.PathLike[str] | None = None,
    workers: int = 1,
) -> list[VideoProbe]:
    """Probe many files with ``workers`` sandboxed worker processes; results in the order of ``paths``."""
    items: Sequence[str | os.PathLike[str]] = list(paths)
    results: list[VideoProbe | None] = [None] * len(items)
    errors: list[BaseException] = []
    cursor = iter(range(len(items)))
    lock = threading.Lock()

    def run() -> None:
        with VideoProber(limits) as prober:
            while not errors:
                with lock:
                    index = next(cursor, None)
                if index is None:
                    return
                try:
                    results[index] = prober.probe(items[index], root=root)
                except BaseException as exc:  # re-raised in the caller's thread below
                    errors.append(exc)

    threads = [
        threading.Thread(target=run, name=f"videoprobe-{i}") for i in range(max(1, min(workers, len(items))))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]
