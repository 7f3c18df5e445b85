"""The sandboxed probe worker: ``python -m pipeline.videoprobe._worker``, driven over stdin/stdout.

Protocol (one JSON object per line): the parent sends the limits; the worker imports PyAV, locks itself
down (address-space limit, no file writes, no core dumps, few descriptors) and answers ``{"ready": ...}``;
then each request ``{"path_b64": ...,"family": ...}`` gets one result line. After running out of memory the
worker answers and exits, so the next file starts in a clean process.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import signal
import sys
from typing import Any, BinaryIO


def _vm_size_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmSize missing from /proc/self/status")


def _lower(limit: int, value: int) -> None:
    _soft, hard = resource.getrlimit(limit)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(limit, (value, value))


def _lock_down(memory_limit_bytes: int) -> int:
    """Apply the sandbox limits to this process; returns the address-space limit set."""
    address_space = _vm_size_bytes() + memory_limit_bytes
    _lower(resource.RLIMIT_AS, address_space)
    # The probe only reads. A write to a regular file fails with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _lower(resource.RLIMIT_FSIZE, 0)
    _lower(resource.RLIMIT_CORE, 0)
    # The input, its procfs reopen, the pipes and a little slack.
    _lower(resource.RLIMIT_NOFILE, 32)
    return address_space


def _send(channel: BinaryIO, message: dict[str, Any]) -> None:
    channel.write(json.dumps(message, allow_nan=False).encode() + b"\n")
    channel.flush()


def main() -> None:
    # The protocol gets a private copy of stdout; fd 1 then points at stderr, so that anything a C library
    # prints cannot corrupt the result stream.
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    setup = json.loads(requests.readline())
    limits = setup["limits"]

    import av

    from pipeline.videoprobe import _measure

    # Error-level FFmpeg logs are captured per file (they count as decode errors); nothing else is kept.
    av.logging.set_level(av.logging.ERROR)
    _measure.warm_up(limits)
    address_space = _lock_down(limits["memory_limit_bytes"])
    _send(
        channel,
        {"ready": True, "pid": os.getpid(), "decoder": _measure.decoder_info(), "rlimit_as": address_space},
    )

    for line in requests:
        request = json.loads(line)
        exit_after = False
        try:
            result = _measure.measure(base64.b64decode(request["path_b64"]), request["family"], limits)
        except MemoryError as exc:
            result = {"resource_error": f"{type(exc).__name__}: {exc}"[:400]}
            exit_after = True
        except Exception as exc:  # a bug or an input PyAV cannot describe: report it, keep serving
            result = {"worker_error": f"{type(exc).__name__}: {exc}"[:400]}
        try:
            _send(channel, result)
        except ValueError as exc:  # a non-finite number slipped into the result
            _send(channel, {"worker_error": f"unserialisable result: {exc}"})
        if exit_after:
            return


if __name__ == "__main__":
    main()
