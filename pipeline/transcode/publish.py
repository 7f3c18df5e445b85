"""Write to a temporary name, verify, publish by rename: a reader sees a whole output or nothing.

The staging file lives in a staging folder on the same filesystem as the output (the store's ``tmp/``
area for steps), so that publishing is one atomic ``os.replace``. A process killed at any point leaves at
most an orphan in the staging folder, never a partial file under the output's name.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.store import fsync_path
from pipeline.transcode.errors import PublishError

#: Read size for hashing outputs: large enough to amortise call overhead, small enough to stay cache-warm.
HASH_BLOCK_BYTES = 8 << 20


def staging_path(final: Path, staging_dir: Path | None = None) -> Path:
    """A fresh, unique staging name for ``final`` (hidden, ``.part``), in ``staging_dir`` or beside it."""
    folder = staging_dir if staging_dir is not None else final.parent
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f".{final.name}.{uuid.uuid4().hex}.part"


@contextlib.contextmanager
def staged(final: Path, staging_dir: Path | None = None) -> Iterator[Path]:
    """Yield a staging path; it is removed if the block raises (a kill -9 leaves it in the staging dir)."""
    path = staging_path(final, staging_dir)
    try:
        yield path
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        raise


def publish(staging: Path, final: Path) -> None:
    """Make ``staging`` durable and rename it to ``final`` (atomic; an identical earlier output is replaced
    by the same bytes, since outputs are deterministic). After :func:`verified_digest` the file's fsync
    has nothing left to write."""
    try:
        fsync_path(staging)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, final)
        fsync_path(final.parent)
    except OSError as exc:
        raise PublishError(str(final), str(exc)) from exc


def sha256_file(path: Path) -> tuple[str, int]:
    """sha256 (hex) and size of a file."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while block := fh.read(HASH_BLOCK_BYTES):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def verified_digest(path: Path, verify: Callable[[Path], None]) -> tuple[str, int]:
    """``verify(path)`` in this thread while, in threads of their own, the file is hashed
    (:func:`sha256_file`) and fsync-ed; returns the hash and size. hashlib and the kernel run without the
    GIL, so the three overlap instead of following one another. An error of ``verify`` is raised once the
    other two have ended; a failed fsync is raised as :class:`PublishError` (it must be reported by this
    fsync: Linux reports a write-back error to the first fsync after it, and a later one succeeds).
    """
    with ThreadPoolExecutor(2, thread_name_prefix="publish") as side:
        digest = side.submit(sha256_file, path)
        synced = side.submit(fsync_path, path)
        verify(path)
        try:
            synced.result()
        except OSError as exc:
            raise PublishError(str(path), f"fsync: {exc}") from exc
        return digest.result()
