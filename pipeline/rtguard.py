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

:func:`realtime_taken_back` wraps code that may open such an encoder. It notes every thread's policy and
priority when the block begins; on :meth:`RealtimeGuard.check` and on leaving, a thread that is now at
``SCHED_FIFO`` or ``SCHED_RR`` with a policy or priority it did not have then goes back: a thread that
existed to what it had (an operator who runs us real-time keeps that), a thread started in the block to
``SCHED_OTHER`` at priority 0. Nice values are kept. Nothing to do for non-root processes:
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
#: A flag that ``sched_getscheduler`` ORs into the policy of a thread that asked for it.
_RESET_ON_FORK = getattr(os, "SCHED_RESET_ON_FORK", 0x40000000)

Policies = dict[int, tuple[int, int]]


def thread_policies() -> Policies:
    """``{thread id: (policy, priority)}`` for every thread of this process; the policy without the
    reset-on-fork flag."""
    found = {}
    for name in os.listdir("/proc/self/task"):
        tid = int(name)
        try:
            found[tid] = (os.sched_getscheduler(tid) & ~_RESET_ON_FORK, os.sched_getparam(tid).sched_priority)
        except ProcessLookupError:  # the thread ended meanwhile
            continue
    return found


def realtime_threads() -> Policies:
    """The threads of :func:`thread_policies` under ``SCHED_FIFO`` or ``SCHED_RR``."""
    return {tid: p for tid, p in thread_policies().items() if p[0] in _REALTIME}


def take_back(before: Policies) -> int:
    """Every thread of this process that is real-time now with a policy or priority it did not have in
    ``before`` (a :func:`thread_policies` of this process) goes back to what it had there, or to
    ``SCHED_OTHER`` when it was not there; returns how many moved."""
    moved = 0
    for tid, now in realtime_threads().items():
        policy, priority = before.get(tid, (os.SCHED_OTHER, 0))
        if now == (policy, priority):
            continue
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(priority))
        except ProcessLookupError:
            continue
        moved += 1
    return moved


class RealtimeGuard:
    """See :func:`realtime_taken_back`."""

    def __init__(self) -> None:
        self.before = thread_policies()
        self.moved = 0

    def check(self) -> None:
        """Take back what was given since the block began (call it once the encoder is open, so that its
        worker threads do not encode at real-time priority)."""
        self.moved += take_back(self.before)


@contextlib.contextmanager
def realtime_taken_back(what: str) -> Iterator[RealtimeGuard]:
    """Run the block; on :meth:`RealtimeGuard.check` and when it ends, put back every thread that a library
    made real-time (see the module docstring). ``what`` names the work in the log."""
    guard = RealtimeGuard()
    try:
        yield guard
    finally:
        guard.check()
        if guard.moved:
            log.info("%s: %d threads made real-time by a codec library put back", what, guard.moved)
