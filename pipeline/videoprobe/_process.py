"""The caller's handle on one sandboxed worker process: start it, talk JSON lines to it, kill it."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import selectors
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pipeline
from pipeline.videoprobe.config import VideoProbeLimits
from pipeline.videoprobe.errors import ProbeWorkerError

# Starting the interpreter and importing PyAV, numpy and pydantic takes about a second on a busy 2-core
# machine; a minute only matters on a machine so loaded that nothing else would work either. It is not
# charged to any file's timeout.
WORKER_START_TIMEOUT_S = 60.0
# Enough of the worker's stderr to show a Python traceback or FFmpeg's last complaints after a crash.
_STDERR_TAIL_LINES = 40


class WorkerProcess:
    """One live worker process with its result pipe and a bounded tail of its stderr."""

    def __init__(self, limits: VideoProbeLimits, python: str) -> None:
        root = str(Path(pipeline.__file__).resolve().parent.parent)
        # A minimal environment: the worker parses hostile input and needs nothing of ours but the code.
        # One BLAS thread: numpy's pools would otherwise reserve address space counted by RLIMIT_AS.
        env = {"PYTHONPATH": root, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "LC_ALL": "C.UTF-8"}
        self.proc = subprocess.Popen(
            # -s: no user site-packages; -B: no bytecode writes; faulthandler: a crash leaves a traceback.
            [python, "-s", "-B", "-X", "faulthandler", "-m", "pipeline.videoprobe._worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",
            start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self._stdout_fd = self.proc.stdout.fileno()
        os.set_blocking(self._stdout_fd, False)
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._stdout_fd, selectors.EVENT_READ)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL_LINES)
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True, name="videoprobe-stderr")
        self._drain.start()
        try:
            self.send({"limits": limits.model_dump(mode="json")})
            ready = self.receive(WORKER_START_TIMEOUT_S)
        except (EOFError, BrokenPipeError, ProbeWorkerError):
            ready = None
        if not isinstance(ready, dict) or not ready.get("ready"):
            self.kill()
            raise ProbeWorkerError("did not start", self.stderr_text())
        self.decoder: dict[str, str] = ready["decoder"]

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr_tail.append(raw.decode("utf-8", "replace").rstrip())

    def stderr_text(self) -> str:
        self._drain.join(timeout=1.0)
        return " | ".join(line for line in self.stderr_tail if line)[-2000:]

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout_s: float) -> dict[str, Any] | None:
        """The next result line; ``None`` on timeout; raises EOFError when the worker died."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                return None
            chunk = os.read(self._stdout_fd, 1 << 16)
            if not chunk:
                raise EOFError
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            raise ProbeWorkerError(f"answered a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(message, dict):
            raise ProbeWorkerError(f"answered {type(message).__name__}, expected an object")
        return message

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        self._selector.close()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        return code
