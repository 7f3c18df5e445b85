"""A node-wide bandwidth cap for reads: a token bucket every process on the machine shares, and a file
object that draws from it.

The DDRA paper measures loading through remote storage under a node-wide bandwidth cap (20 to 800 MiB/s).
To measure the same here, every byte a reader fetches goes through :class:`ThrottledFile`, whose reads take
tokens from one :class:`TokenBucket`. The bucket's state (tokens, last refill) lives in a 16-byte file
(under ``/dev/shm`` by default) updated under an exclusive ``flock``, so loader worker processes, spawned
or not, draw from the same bucket; the clock is ``CLOCK_MONOTONIC``, which every process on a Linux node
shares. A read larger than the tokens left runs the bucket into debt and sleeps until the debt is paid:
readers queue in the order they asked, and the long-run rate is the cap whatever the read sizes.
"""

from __future__ import annotations

import fcntl
import io
import mmap
import os
import struct
import time
from pathlib import Path
from typing import IO, Any

_STATE = struct.Struct("<dd")  # tokens (bytes), last refill (monotonic seconds)
DEFAULT_DIRECTORY = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")


class TokenBucket:
    """``rate_bytes_per_s`` shared by every process that opens the bucket ``name``; bursts of at most
    ``burst_bytes`` (default: 10 ms at the rate) pass without waiting. Picklable: a child process reopens
    the same state file."""

    def __init__(
        self,
        rate_bytes_per_s: float,
        name: str,
        *,
        burst_bytes: float | None = None,
        directory: Path = DEFAULT_DIRECTORY,
    ) -> None:
        if not rate_bytes_per_s > 0:
            raise ValueError(f"rate_bytes_per_s {rate_bytes_per_s!r} is not allowed; expected > 0")
        self.rate_bytes_per_s = float(rate_bytes_per_s)
        self.burst_bytes = float(burst_bytes if burst_bytes is not None else self.rate_bytes_per_s / 100)
        self.path = Path(directory) / f"sluice-bucket-{name}"
        self._fd: int | None = None
        self._map: mmap.mmap | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fd": None, "_map": None}

    def _state(self) -> tuple[int, mmap.mmap]:
        if self._fd is None or self._map is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size < _STATE.size:  # the first opener fills the bucket
                    os.write(fd, _STATE.pack(self.burst_bytes, time.monotonic()))
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            self._fd, self._map = fd, mmap.mmap(fd, _STATE.size)
        return self._fd, self._map

    def take(self, size_bytes: int) -> float:
        """Take ``size_bytes`` tokens, sleeping while the bucket is in debt; returns the seconds slept."""
        fd, state = self._state()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            tokens, last = _STATE.unpack_from(state)
            now = time.monotonic()
            tokens = min(self.burst_bytes, tokens + (now - last) * self.rate_bytes_per_s) - size_bytes
            _STATE.pack_into(state, 0, tokens, now)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        wait_s = -tokens / self.rate_bytes_per_s if tokens < 0 else 0.0
        if wait_s:
            time.sleep(wait_s)
        return wait_s

    def reset(self) -> None:
        """Remove the shared state (the next take starts from a full bucket)."""
        self.close()
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
        if self._fd is not None:
            os.close(self._fd)
        self._fd = self._map = None


class ThrottledFile:
    """A read-only binary file whose reads take their size in tokens from ``bucket`` (None: no cap) and are
    counted in :attr:`bytes_read` / :attr:`reads`. Seeks are free (a range request costs its bytes).

    Deliberately not an ``io.RawIOBase``: libraries wrap those in a ``BufferedReader`` whose collection
    closes the file under the reader's feet (the mcap reader does)."""

    def __init__(self, inner: IO[bytes], bucket: TokenBucket | None, name: str = "") -> None:
        self._inner = inner
        self.bucket = bucket
        self.name = name or getattr(inner, "name", "<throttled>")
        self.bytes_read = 0
        self.reads = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        if data:
            self.reads += 1
            self.bytes_read += len(data)
            if self.bucket is not None:
                self.bucket.take(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    @property
    def closed(self) -> bool:
        return bool(self._inner.closed)

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> ThrottledFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
