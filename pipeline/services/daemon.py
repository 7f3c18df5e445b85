"""One shape for every long-running process the project starts: start, health, stop, logs, what ``down`` finds.

A :class:`Daemon` is one command run detached in its own process group (so that stopping it stops what it
forked), with its pid and start instant in ``<run_dir>/<name>.pid`` and its output in
``<log_dir>/<name>.log``. A later process (``sluice services down``, a test's teardown) finds it from those
files alone; the recorded start instant (:func:`process_start_mark`) makes sure a
signal only ever reaches the very process that was started, never a stranger that got its pid. Likewise a
start is ready only when ``ready`` holds *and* that process still runs: another program that holds the
port may answer while ours exits, unable to bind it.

Not mirakuru (which pytest-postgresql and pytest-redis build on): its executors kill everything they
started when the starting Python process exits (an ``atexit`` hook), and this project's services must
outlive the command that started them (``sluice services up``, ``--keep-running``). Ports come from
port-for, as with those plugins.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import InfrastructureError

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


class ServiceError(InfrastructureError):
    """A service the project starts did not come up, or is missing from this machine."""


@dataclass(frozen=True)
class DaemonStatus:
    name: str
    pid: int | None
    log_file: Path

    @property
    def running(self) -> bool:
        return self.pid is not None


def free_port() -> int:
    """A TCP port nothing listens on now (port-for's choice among the unprivileged ones)."""
    import port_for

    return int(port_for.select_random())


def kept_port(path: Path, choose: Callable[[], int] = free_port) -> int:
    """The port recorded in ``path``, chosen (and recorded) on first use: a restart serves where it did."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(choose()))
    return int(path.read_text())


def recorded_port(path: Path) -> int | None:
    """The port recorded in ``path``, or None: for ``status`` and ``down``, which must not record one."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def claim_port(path: Path, host: str, choose: Callable[[], int] = free_port) -> tuple[int, int | None]:
    """The port to start a service on, and the kept port given up (None when it is kept).

    The port recorded in ``path`` when it is free (a restart serves where it did); when another program
    holds it, a new one from ``choose``, recorded in its place: a service that cannot bind its port exits,
    and one that starts elsewhere only moves its address.
    """
    kept = kept_port(path, choose)
    if port_free(host, kept):
        return kept, None
    port = choose()
    path.write_text(str(port))
    log.info("port %d of %s is taken by another program; using port %d", kept, path, port)
    return port, kept


def moved(given_up: int | None, where: str) -> tuple[str, ...]:
    """The note :class:`Started` carries when :func:`claim_port` gave up the kept port ``given_up``."""
    if given_up is None:
        return ()
    return (
        f"port {given_up} was taken by another program, so it now serves at {where}: "
        "clients that kept the old address must take the new one",
    )


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now (nothing listens there, on it or on 0.0.0.0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the servers themselves bind: a connection of an earlier run in TIME_WAIT does not hold it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def start_on_kept_port(
    name: str,
    running: Daemon,
    port_file: Path,
    host: str,
    launch: Callable[[int], Daemon],
    where: Callable[[], str],
) -> Started:
    """Start a one-process service unless ``running`` (its daemon as ``status`` finds it) runs: ``launch``
    gives its daemon on the kept port, or on a new one when another program took that (:func:`claim_port`);
    ``where`` says where it serves once the port is settled."""
    if running.live_pid() is not None:
        return Started(where(), started=(), already_running=(name,))
    port, given_up = claim_port(port_file, host)
    launch(port).start()
    return Started(where(), started=(name,), notes=moved(given_up, where()))


@dataclass(frozen=True)
class Started:
    """What bringing a service up did: where it serves, which of its processes it started now and which
    already ran, and anything its user must know (a port that moved)."""

    where: str
    started: tuple[str, ...]
    already_running: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def was_running(self) -> bool:
        """Whether every process already ran (nothing was started)."""
        return not self.started


def port_answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect((host, port))
        except OSError:
            return False
    return True


class Daemon:
    """``argv`` run detached as ``name``; ``ready`` says when it serves (polled after the start)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        run_dir: Path,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.run_dir = run_dir
        self.log_dir = log_dir
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.ready = ready

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def live_pid(self) -> int | None:
        """The recorded pid if that very process (same start instant) still runs."""
        import psutil

        try:
            pid_text, mark = self.pid_file.read_text().split()
            pid = int(pid_text)
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return None
        except (OSError, ValueError, psutil.Error):
            return None
        return pid if process_start_mark(pid) == mark else None

    def status(self) -> DaemonStatus:
        return DaemonStatus(self.name, self.live_pid(), self.log_file)

    def start(self, *, timeout_s: float = START_TIMEOUT_S) -> int:
        """Start it unless it runs; wait until ``ready``; return its pid."""
        pid = self.launch()
        self.wait_ready(timeout_s=timeout_s)
        return pid

    def launch(self) -> int:
        """Start it unless it runs, without waiting for it to be ready (to start several at once)."""
        pid = self.live_pid()
        if pid is None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with self.log_file.open("ab") as out:
                process = subprocess.Popen(
                    self.argv,
                    env=self.env,
                    cwd=self.cwd,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own group: stop() reaches whatever it forks
                )
            pid = process.pid
            self.pid_file.write_text(f"{pid} {process_start_mark(pid)}")
            log.info("started %s (pid %d), log %s", self.name, pid, self.log_file)
        return pid

    def wait_ready(self, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll ``ready`` until it holds while this very process still runs.

        Liveness is checked after each ``ready``: an answer on the port counts only from a process that is
        still there afterwards, since another program holding the port may answer while ours exits on it.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            ready = self.ready is None or self.ready()
            if self.live_pid() is None:
                raise ServiceError(
                    f"{self.name} exited during start-up; the last lines of its log "
                    f"{self.log_file}:\n{tail(self.log_file)}"
                )
            if ready:
                return
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"{self.name} did not become ready within {timeout_s:g} s:\n{tail(self.log_file)}"
                )
            time.sleep(0.2)

    def signal(self, signum: int) -> int | None:
        """Send ``signum`` to the daemon's process group (a fault test's kill -9); its pid, or None."""
        pid = self.live_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signum)
        return pid

    def stop(self, *, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM to its group, SIGKILL after ``timeout_s``; whether it was running."""
        pid = self.live_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and group_alive(pid):
            time.sleep(0.1)
        if group_alive(pid):
            log.warning("%s (pid %d) did not stop in %g s; killing it", self.name, pid, timeout_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            while group_alive(pid):
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        log.info("stopped %s (pid %d)", self.name, pid)
        return True


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def process_start_mark(pid: int) -> str:
    """When process ``pid`` started, as a token that stays the same for that process's whole life.

    On Linux: its start time in clock ticks since boot (``/proc/PID/stat``, field 22). Not psutil's
    ``create_time()``: that adds the boot time, which the kernel derives from the wall clock, so a clock
    step (an NTP correction, a VM resumed or its clock set) moves it, and ``down`` then took every service
    it had started for a stranger's (it printed "nothing was running" while all four ran, and deleted their
    pid files). Elsewhere, ``create_time()`` to the second. "" when there is no such process.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return "ticks:" + stat[stat.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    try:
        return f"created:{psutil.Process(pid).create_time():.0f}"
    except psutil.Error:
        return ""


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies do not count; our own child is reaped)."""
    import psutil

    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False
