"""A codec library that makes our threads real-time is undone (pipeline.rtguard).

Each case runs in a fresh interpreter: a failure must not leave the pytest process, and every process it
starts later, at real-time priority. Real-time policies need root (CAP_SYS_NICE), and SVT-AV1 only raises
priorities as root, so the cases run only there (CI runs as root).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="real-time scheduling needs root")


def _run(code: str, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


_ENCODES = """
import json, os, sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from pipeline.bench.contenders import LEROBOT_V3_ENCODER, LEROBOT_V3_OPTIONS, write_lerobot_video
from pipeline.rtguard import realtime_threads, take_back


def after():
    # this thread's policy, how many threads are real-time, and the policy a forked child starts with
    pid = os.fork()
    if pid == 0:
        os._exit(10 + os.sched_getscheduler(0))
    _, status = os.waitpid(pid, 0)
    child = os.waitstatus_to_exitcode(status) - 10
    return {"caller": os.sched_getscheduler(0), "realtime": len(realtime_threads()), "child": child}


class Watched(list):
    # the frames, noting how many threads are real-time once the encoder has taken two of them

    def __iter__(self):
        for k, frame in enumerate(list.__iter__(self)):
            if k == 2:
                self.mid = len(realtime_threads())
            yield frame


frames = Watched(np.full((96 * 3 // 2, 128), 16 * k, dtype=np.uint8) for k in range(6))
# the library as a stock PyAV encode uses it
raw = av.CodecContext.create(LEROBOT_V3_ENCODER, "w")
raw.width, raw.height, raw.pix_fmt = 128, 96, "yuv420p"
raw.time_base, raw.options = Fraction(1, 30), dict(LEROBOT_V3_OPTIONS)
raw.encode(av.VideoFrame.from_ndarray(frames[0], format="yuv420p"))
raw.encode(None)
del raw
unguarded = after()
take_back({})  # every thread back to normal
write_lerobot_video(Path(sys.argv[1]), frames, Fraction(30))
print(json.dumps({"unguarded": unguarded, "guarded": after(), "mid": frames.mid}))
"""


def test_a_lerobot_v3_encode_leaves_no_thread_real_time(tmp_path) -> None:
    out = tmp_path / "cam.mp4"
    result = _run(_ENCODES, str(out))
    if result["unguarded"]["caller"] == os.SCHED_OTHER:
        pytest.skip("SVT-AV1 raised no priority here (a build that does not, or root without CAP_SYS_NICE)")
    # the hazard as measured: the encoding thread, and what it forks, run FIFO
    assert result["unguarded"]["child"] == os.SCHED_FIFO
    # through the project's encode: back to normal during the encode and after it, children included
    assert result["mid"] == 0
    assert result["guarded"] == {"caller": os.SCHED_OTHER, "realtime": 0, "child": os.SCHED_OTHER}
    assert out.stat().st_size > 0


def test_the_guard_takes_back_what_a_library_gave_and_keeps_what_an_operator_asked() -> None:
    result = _run(
        """
        import json, os, sys, threading
        from pipeline.rtguard import realtime_taken_back, thread_policies

        FIFO = os.SCHED_FIFO

        class Idle(threading.Thread):
            def __init__(self):
                super().__init__(daemon=True)
                self.ready, self.done = threading.Event(), threading.Event()

            def run(self):
                self.tid = threading.get_native_id()
                self.ready.set()
                self.done.wait()

        def started():
            thread = Idle()
            thread.start()
            thread.ready.wait()
            return thread

        def policies(*tids):
            now = thread_policies()
            return [list(now[tid]) for tid in tids]

        me, other = threading.get_native_id(), started()
        try:
            os.sched_setscheduler(0, FIFO, os.sched_param(1))
        except PermissionError:  # root without CAP_SYS_NICE (a container's default)
            print(json.dumps({"skip": "no CAP_SYS_NICE"}))
            sys.exit(0)
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))

        # a library raises the caller and another thread: both go back
        with realtime_taken_back("test") as guard:
            os.sched_setscheduler(0, FIFO, os.sched_param(99))
            os.sched_setscheduler(other.tid, FIFO, os.sched_param(99))
        given = {"moved": guard.moved, "after": policies(me, other.tid)}

        # the operator runs the caller and the other thread at FIFO 1; a library raises the caller to 99
        # and starts a thread of its own at 99: the caller goes back to 1, the other stays, the new one is
        # normal
        os.sched_setscheduler(0, FIFO, os.sched_param(1))
        os.sched_setscheduler(other.tid, FIFO, os.sched_param(1))
        with realtime_taken_back("test") as guard:
            os.sched_setscheduler(0, FIFO, os.sched_param(99))
            new = started()
            os.sched_setscheduler(new.tid, FIFO, os.sched_param(99))
        kept = {"moved": guard.moved, "after": policies(me, other.tid, new.tid)}
        print(json.dumps({"given": given, "kept": kept}))
        """
    )
    if "skip" in result:
        pytest.skip(result["skip"])
    other, fifo = os.SCHED_OTHER, os.SCHED_FIFO
    assert result["given"] == {"moved": 2, "after": [[other, 0], [other, 0]]}
    assert result["kept"] == {"moved": 2, "after": [[fifo, 1], [fifo, 1], [other, 0]]}
