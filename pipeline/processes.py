"""Worker processes for steps: children that owe nothing to the process that started them.

A step that needs more than one core (the transcode's camera encoders) runs its work in a
:class:`WorkerPool`. Its children are started with ``spawn``, and they neither re-import their parent's
``__main__`` module nor keep its ``AIRFLOW_*`` environment:

* ``multiprocessing``'s ``spawn`` (and ``forkserver``) children import the parent's main module again, as
  ``__mp_main__``, before they run anything. Under an Airflow worker the main module is the ``airflow``
  console script, so every child imported all of Airflow, whose settings module parses the metadata-DB URL
  at import; Airflow 3 hands its task processes a deliberately unusable one
  (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``), so every child died before running a line of ours, and the step
  saw only ``BrokenProcessPool``. Under ``airflow dags test`` the URL is valid and each child merely paid
  for importing Airflow. The work a pool runs is module-level functions of :mod:`pipeline`, so the children
  are started as if the parent's main module were empty (:func:`_no_main`): nothing of the caller's script
  runs in them. A pool therefore cannot run functions defined in a ``__main__`` script.
* The children drop the ``AIRFLOW*`` variables first thing (:func:`_start_worker`): nothing in a worker may
  depend on the Airflow task it happens to run under.

A child that dies (a signal, ``os._exit``, the OOM killer) breaks a ``ProcessPoolExecutor`` for good, and
``BrokenProcessPool`` names nobody. A :class:`WorkerPool` turns it into a :class:`WorkerCrashedError` naming
each dead child's exit code or signal and the first line of the traceback it left (children write
``faulthandler`` tracebacks and uncaught errors to a per-child log file), and it replaces the broken
executor before the next submit, so that one crashing item does not fail every later item of the batch.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from pipeline.errors import InfrastructureError

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

#: Environment variables a worker drops at start: the Airflow task's configuration is not the worker's.
DROPPED_ENV_PREFIXES = ("AIRFLOW_", "AIRFLOW__")
#: How much of a dead child's log is kept in the error (its first traceback line is what matters).
CRASH_LOG_BYTES = 4096
#: How long a crash report waits for the dead child's exit code to be readable (it lags by milliseconds).
CRASH_SETTLE_S = 5.0

_main_lock = threading.Lock()
_daemon_lock = threading.Lock()


class WorkerCrashedError(InfrastructureError):
    """A worker process died while it held work: its exit code or signal and the first line it left."""

    def __init__(self, pool: str, deaths: list[str]) -> None:
        self.pool = pool
        self.deaths = list(deaths)
        summary = "; ".join(self.deaths) if self.deaths else "no worker reported why"
        super().__init__(f"{pool} worker died: {summary}")


@contextlib.contextmanager
def _no_main() -> Iterator[None]:
    """While a child is being spawned, show ``multiprocessing`` an empty main module (no file, no spec),
    so that the child's preparation data names no main module to re-import."""
    with _main_lock:
        real = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if real is not None:
                sys.modules["__main__"] = real


@contextlib.contextmanager
def _parent_as_plain_process(child: Any) -> Iterator[None]:
    """While ``child`` is being started, show ``multiprocessing`` this process as one of its own making.

    A task that a Celery worker's prefork pool runs is a fork of one of its pool processes, which are
    billiard's and daemonic. ``multiprocessing`` refuses children to a daemonic process: every transcode on
    a Celery worker failed with "daemonic processes are not allowed to have children". The rule keeps a
    daemon from leaving orphans when it is terminated; these children cannot outlive the pool (WorkerPool
    shuts them down, and a worker whose parent died exits on its broken call queue), so it does not apply.
    The fork also left billiard's AuthenticationString as this process's authkey, which the spawn then
    refused to pickle ("Pickling an AuthenticationString object is disallowed"): the same bytes go as
    multiprocessing's own type.
    """
    config = multiprocessing.process.current_process()._config  # type: ignore[attr-defined]
    saved = {key: config[key] for key in ("daemon", "authkey") if key in config}
    plain = getattr(multiprocessing.process, "AuthenticationString")  # noqa: B009 (not in the stubs)
    config["daemon"] = False
    for target in (config, child._config):
        if target.get("authkey") is not None and type(target["authkey"]) is not plain:
            target["authkey"] = plain(bytes(target["authkey"]))
    try:
        yield
    finally:
        config.pop("daemon", None)
        config.update(saved)


class _CleanProcess(SpawnProcess):
    def start(self) -> None:
        with _daemon_lock, _parent_as_plain_process(self):
            super().start()

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        with _no_main():
            return SpawnProcess._Popen(process_obj)


class _CleanSpawnContext(SpawnContext):
    Process = _CleanProcess


def _start_worker(log_dir: str, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    """First thing in every child: forget the Airflow environment, log crashes to this child's file."""
    for key in [k for k in os.environ if k.startswith(DROPPED_ENV_PREFIXES)]:
        del os.environ[key]
    crash_log = open(Path(log_dir) / f"{os.getpid()}.log", "w", buffering=1)  # noqa: SIM115 (lives as long as the process)
    faulthandler.enable(file=crash_log, all_threads=True)
    previous = sys.excepthook

    def record(kind: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> None:
        import traceback

        crash_log.write("".join(traceback.format_exception(kind, value, tb)))
        previous(kind, value, tb)

    sys.excepthook = record
    if initializer is not None:
        initializer(*initargs)


def _death(process: multiprocessing.process.BaseProcess, log_dir: Path) -> str | None:
    """How one child ended (None while it runs or when it exited cleanly), with the first traceback line."""
    code = process.exitcode
    if code is None or code == 0:
        return None
    if code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exited {code}"
    first = _first_traceback_line(log_dir / f"{process.pid}.log")
    return f"pid {process.pid} {how}" + (f": {first}" if first else "")


def _first_traceback_line(path: Path) -> str | None:
    """The line that says what happened: faulthandler's "Fatal Python error: ..." or an exception's last
    line, else the first non-empty line."""
    try:
        with path.open("rb") as handle:
            text = handle.read(CRASH_LOG_BYTES).decode(errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("Fatal Python error"):
            return line
    for line in reversed(lines):
        if not line.startswith(("File ", "Traceback", "^", "~")) and not line.startswith("Current thread"):
            return line
    return lines[0] if lines else None


class _Linked(Future[T]):
    """The future a :class:`WorkerPool` hands out: settled from the executor's own, cancelled with it.

    Not cancelled once the executor is broken: Python 3.11's executor then fails every pending future in
    its manager thread, and a future cancelled meanwhile made that thread die on ``InvalidStateError``
    before it terminated the other children (fixed in 3.12). A surviving child, blocked on the call
    queue's lock that the dead one held, then hung its parent at exit. The executor marks itself broken
    before it fails the first future, so a caller that cancels the rest after the first failure is refused
    here, and gets the crash as their result instead.
    """

    def __init__(self, inner: Future[T], executor: ProcessPoolExecutor) -> None:
        super().__init__()
        self._inner = inner
        self._executor = executor

    def cancel(self) -> bool:
        if getattr(self._executor, "_broken", False):
            return False
        return self._inner.cancel() and super().cancel()


class WorkerPool(Executor):
    """A pool of ``processes`` clean worker processes (see the module docstring), named for its errors.

    ``initializer(*initargs)`` runs once in every child after the environment is cleaned. Futures of work
    that was running or queued when a child died raise :class:`WorkerCrashedError`; the next
    :meth:`submit` starts a fresh executor.
    """

    def __init__(
        self,
        processes: int,
        *,
        name: str = "worker",
        initializer: Callable[..., None] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        if processes < 1:
            raise ValueError(f"a worker pool needs at least one process, not {processes}")
        self.processes = processes
        self.name = name
        self._initializer = initializer
        self._initargs = initargs
        self._log_dir = Path(tempfile.mkdtemp(prefix=f"sluice-{name}-"))
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        self._children: dict[int, multiprocessing.process.BaseProcess] = {}
        self._deaths: dict[int, list[str]] = {}  # id of a broken executor -> how its children died

    def _current(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is not None and getattr(self._executor, "_broken", False):
                log.warning("%s pool: a worker died; starting a fresh pool", self.name)
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None
                self._deaths.clear()
                self._children.clear()
            if self._executor is None:
                self._executor = ProcessPoolExecutor(
                    self.processes,
                    mp_context=_CleanSpawnContext(),
                    initializer=_start_worker,
                    initargs=(str(self._log_dir), self._initializer, self._initargs),
                )
            return self._executor

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        executor = self._current()
        inner = executor.submit(fn, *args, **kwargs)
        # The executor starts its children on demand, in submit: remember them for the post-mortem.
        self._children.update(getattr(executor, "_processes", None) or {})
        outer = _Linked(inner, executor)

        def settle(done: Future[T]) -> None:
            if done.cancelled():
                outer.cancel()
                outer.set_running_or_notify_cancel()
            elif isinstance(error := done.exception(), BrokenProcessPool):
                crashed = self._crash_error(executor)
                crashed.__cause__ = error
                outer.set_exception(crashed)
            elif error is not None:
                outer.set_exception(error)
            else:
                outer.set_result(done.result())

        inner.add_done_callback(settle)
        return outer

    def pids(self) -> list[int]:
        """Process ids of the pool's live children (started as work arrives)."""
        with self._lock:
            executor = self._executor
        processes = dict(getattr(executor, "_processes", None) or {}) if executor is not None else {}
        return sorted(pid for pid, process in processes.items() if process.is_alive())

    def _crash_error(self, executor: ProcessPoolExecutor) -> WorkerCrashedError:
        """The error for a future of ``executor``, broken by a child's death. Worked out once per broken
        executor: its manager thread calls this for every pending future before it terminates the children
        still alive, so waiting for those each time only added seconds per future."""
        with self._lock:
            deaths = self._deaths.get(id(executor))
        if deaths is None:
            children = list(self._children.values())
            # a dead child's exit code can lag its closed sentinel, by which the executor saw it die
            deadline = time.monotonic() + CRASH_SETTLE_S
            while time.monotonic() < deadline and all(child.exitcode in (None, 0) for child in children):
                time.sleep(0.01)
            deaths = [d for child in children if (d := _death(child, self._log_dir)) is not None]
            # Children the executor terminated after the first death exit with SIGTERM: name the cause first.
            deaths.sort(key=lambda d: "SIGTERM" in d)
            with self._lock:
                self._deaths[id(executor)] = deaths
        return WorkerCrashedError(self.name, deaths)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=wait, cancel_futures=cancel_futures)
                self._executor = None
        shutil.rmtree(self._log_dir, ignore_errors=True)


__all__ = ["DROPPED_ENV_PREFIXES", "WorkerCrashedError", "WorkerPool"]
