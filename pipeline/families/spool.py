"""A camera's compressed pictures handed to another process through a file, read while it is written.

The transcode's encoder processes start on a camera before the source log has been read to its end: the
process that reads the log appends each picture to the camera's spool file (:class:`SpoolWriter`), and
the encoder reads the file as it grows (:func:`read_spool`), waiting for each record to be whole. Nothing
is pickled across the processes, and the reader holds the pictures in the page cache, not in its heap.

A spool file is a sequence of records: a header (payload bytes, format text bytes), the format text
(``format``, NUL, the format as the message declared it) and the payload; a header with
:data:`END_OF_SPOOL` bytes ends it. The writer withdraws a spool by removing the file (the source turned
out bad, or the pictures must be encoded another way): a reader checks before every record, and raises
:class:`SpoolWithdrawnError`. A reader also gives up on a writer process that has died.
"""

from __future__ import annotations

import io
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import av

from pipeline.errors import SluiceError
from pipeline.families.frames import FramePayload, decode_payloads
from pipeline.families.table import FrameKind

_HEAD = struct.Struct("<IH")  # payload bytes, format text bytes
#: The payload size in the header that ends a spool.
END_OF_SPOOL = 0xFFFFFFFF
#: Waits of a reader that has caught up with the writer: short at first (the writer is usually a read of
#: one chunk ahead), doubling to at most 20 ms, so that a long wait costs no CPU to speak of.
FIRST_WAIT_S = 0.0005
LONGEST_WAIT_S = 0.02


class SpoolWithdrawnError(SluiceError):
    """The spool's writer removed it, or died, before its end: the pictures will not come."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(f"picture spool {path}: {why}")


class SpoolWriter:
    """Appends a camera's pictures to a new spool file at ``path`` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self.count = 0

    def add(self, payload: FramePayload) -> None:
        """Append one picture (written straight to the file: a reader sees it at once)."""
        if len(payload.data) >= END_OF_SPOOL:
            raise ValueError(f"a picture of {len(payload.data)} bytes does not fit a spool record")
        text = f"{payload.format}\0{payload.declared}".encode()
        self._write(_HEAD.pack(len(payload.data), len(text)) + text, payload.data)
        self.count += 1

    def end(self) -> None:
        """Mark the spool complete and close the file."""
        self._write(_HEAD.pack(END_OF_SPOOL, 0))
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, *parts: bytes) -> None:
        if self._fd is None:
            raise ValueError(f"spool {self.path} is closed")
        views = [memoryview(p) for p in parts]
        while views:
            written = os.writev(self._fd, views)
            while views and written >= len(views[0]):
                written -= len(views[0])
                views.pop(0)
            if views and written:
                views[0] = views[0][written:]

    def __enter__(self) -> SpoolWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def read_spool(path: str | Path, *, writer_pid: int | None = None) -> Iterator[FramePayload]:
    """The pictures of a spool in the order written.

    ``writer_pid``: the writing process, while the spool may still grow (the reader waits for records,
    and gives up if that process dies); None for a finished spool, where a record cut short is an error.
    Raises :class:`SpoolWithdrawnError` when the spool is removed before its end.
    """
    path = str(path)
    try:
        handle = open(path, "rb", buffering=0)  # noqa: SIM115 (closed below; a generator holds it)
    except FileNotFoundError:
        raise SpoolWithdrawnError(path, "removed before it was opened") from None
    with handle:
        take = _Taker(handle, path, writer_pid)
        while True:
            if not os.path.exists(path):
                raise SpoolWithdrawnError(path, "removed before its end")
            size, text_size = _HEAD.unpack(take(_HEAD.size))
            if size == END_OF_SPOOL:
                return
            fmt, _, declared = take(text_size).decode().partition("\0")
            yield FramePayload(fmt, take(size), declared)


class _Taker:
    """Reads exactly n bytes from a spool, waiting while its writer has not written them yet."""

    def __init__(self, handle: io.FileIO, path: str, writer_pid: int | None) -> None:
        self.handle = handle
        self.path = path
        self.writer_pid = writer_pid
        # a writer that is this process's parent is gone when the parent changes (a dead parent that
        # nobody has reaped yet still answers a signal)
        self.parent_writes = writer_pid == os.getppid()

    def __call__(self, n: int) -> bytes:
        read = self.handle.read
        data = read(n) or b""
        if len(data) == n:
            return data
        parts = [data]
        got = len(data)
        wait = FIRST_WAIT_S
        while got < n:
            more = read(n - got) or b""
            if more:
                parts.append(more)
                got += len(more)
                wait = FIRST_WAIT_S
                continue
            self._may_wait()
            time.sleep(wait)
            wait = min(2 * wait, LONGEST_WAIT_S)
        return b"".join(parts)

    def _may_wait(self) -> None:
        if self.writer_pid is None:
            raise SpoolWithdrawnError(self.path, "ends inside a record")
        if not os.path.exists(self.path):
            raise SpoolWithdrawnError(self.path, "removed before its end")
        if self.parent_writes and os.getppid() != self.writer_pid:
            raise SpoolWithdrawnError(self.path, f"its writer (pid {self.writer_pid}) has died")
        try:
            os.kill(self.writer_pid, 0)
        except ProcessLookupError:
            raise SpoolWithdrawnError(self.path, f"its writer (pid {self.writer_pid}) has died") from None
        except PermissionError:
            pass  # alive, another user's


@dataclass(frozen=True)
class SpooledFrames:
    """A camera's pictures as an encoder process gets them: a spool that ``writer_pid`` is writing."""

    kind: FrameKind
    path: str
    writer_pid: int

    def decode(self, *, what: str) -> Iterator[av.VideoFrame]:
        """Every picture as a frame, ``pts`` = its index in decode order (waiting for the writer)."""
        return decode_payloads(self.kind, read_spool(self.path, writer_pid=self.writer_pid), what=what)
