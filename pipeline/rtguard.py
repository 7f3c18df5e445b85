"""Real-time scheduling that a codec library gives our threads, taken back.

SVT-AV1 (the ``libsvtav1`` encoder in the PyAV wheel, v4.1.0), run as root, makes the thread that opens an
encoder ``SCHED_FIFO`` at priority 99 and creates its own ~40 worker threads the same way. Measured here: the
calling thread is still FIFO 99 after the encoder is freed, and a process it forks afterwards is FIFO 99
from its start (the policy is inherited across ``fork`` and ``exec``). Robot-data workers often run as root
in containers. A FIFO 99 thread preempts every normal thread on its core until it blocks, and the kernel
leaves normal threads only 5% of each second while real-time ones want the CPU; one busy FIFO thread per
core starves the host. The one stall of ``make test`` seen here looked like that: the load at 19-37 for
minutes, two Airflow supervisor processes at FIFO 99 spinning. The read benchmark's test runs its LeRobot v3
encode in the pytest process, before the tests that start Airflow schedulers.

:func:`realtime_taken_back` wraps code that may open such an encoder: on :meth:`RealtimeGuard.check` and
on leaving, every thread of this process at ``SCHED_FIFO`` or ``SCHED_RR`` goes back to ``SCHED_OTHER``
(priority 0; its nice value is kept), unless the calling thread was already real-time when the block
began: then an operator asked for it, and nothing is changed. Nothing to do for non-root processes:
SVT-AV1 checks ``geteuid() == 0`` first, and without ``CAP_SYS_NICE`` the kernel refuses anyway. We found
no option in PyAV or SVT-AV1 that turns it off (SVT's thread code asks for priority 99 whenever it runs as
root), and no library that undoes it, hence this module.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

log = logging.getLogger(__name__)

_REALTIME = frozenset({os.SCHED_FIFO, os.SCHED_RR})


def realtime_threads(pid: int | None = None) -> dict[int, tuple[int, int]]:
    """``{thread id: (policy, priority)}`` for the threads of process ``pid`` (this one when None) that run
    under a real-time policy."""
    found = {}
    task = f"/proc/{os.getpid() if pid is None else pid}/task"
    for name in os.listdir(task):
        tid = int(name)
        try:
            policy = os.sched_getscheduler(tid)
            if policy in _REALTIME:
                found[tid] = (policy, os.sched_getparam(tid).sched_priority)
        except (ProcessLookupError, PermissionError):  # the thread ended meanwhile, or is not ours
            continue
    return found


def normal_scheduling() -> int:
    """Put every real-time thread of this process back under ``SCHED_OTHER``; returns how many were."""
    moved = 0
    for tid in realtime_threads():
        try:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except ProcessLookupError:
            continue
        moved += 1
    return moved


class RealtimeGuard:
    """See :func:`realtime_taken_back`."""

    def __init__(self) -> None:
        # the calling thread's own policy: 0 stands for this thread in sched_getscheduler
        self.active = os.sched_getscheduler(0) not in _REALTIME
        self.moved = 0

    def check(self) -> None:
        """Take back what was given since the block began (call it once the encoder is open, so that its
        worker threads do not encode at real-time priority)."""
        if self.active:
            self.moved += normal_scheduling()


@contextlib.contextmanager
def realtime_taken_back(what: str) -> Iterator[RealtimeGuard]:
    """Run the block; on :meth:`RealtimeGuard.check` and when it ends, move every thread that a library made
    real-time back to normal scheduling (see the module docstring). ``what`` names the work in the log."""
    guard = RealtimeGuard()
    try:
        yield guard
    finally:
        guard.check()
        if guard.moved:
            log.info("%s: %d threads made real-time by a codec library put back to normal", what, guard.moved)
