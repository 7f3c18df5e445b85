"""The object store: a content-addressed, write-once raw area and the derived areas, over fsspec.

Layout under the store root (a local folder by default, any fsspec URL in production)::

    raw/<sha256>                                   landed vendor bytes, never modified or deleted
    derived/<step>/<config hash>/<episode>/...     step outputs
    shards/<dataset>/<version>/...                 WebDataset shards
    manifests/<dataset>/<version>/...              training manifests
    tmp/                                           staging area; nothing here is ever referenced

Landing streams a source once: sha256 (the identity) is computed in a helper thread while the main thread
writes the staging copy and a CRC32C of what it wrote; the staged copy is then re-read and its CRC32C checked
before it is published under its hash. On a local store, publishing is a hard link, which fails instead of
overwriting when the object already exists, so two landers of the same bytes can race safely.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import fsspec
import google_crc32c
from fsspec.implementations.local import LocalFileSystem

from pipeline.errors import StoreError

log = logging.getLogger(__name__)

RAW = "raw"
DERIVED = "derived"
SHARDS = "shards"
MANIFESTS = "manifests"
TMP = "tmp"
#: 8 MiB blocks: large enough that hashlib and crc32c release the GIL and amortise per-call overhead,
#: small enough that the few blocks in flight stay well under 100 MiB.
BLOCK_BYTES = 8 << 20
#: Blocks queued for the hashing thread before the copy waits for it (bounds memory to ~32 MiB).
MAX_BLOCKS_IN_FLIGHT = 4


@dataclass(frozen=True)
class Landed:
    """One source landed in the raw store."""

    sha256: str
    size_bytes: int
    uri: str
    created: bool  # False when the same bytes were already there


@dataclass(frozen=True)
class ScrubFinding:
    sha256: str
    uri: str
    problem: str  # "missing", "size", "hash"
    detail: str


class Store:
    """A store rooted at ``url`` (a local path or any fsspec URL)."""

    def __init__(self, url: str | Path, storage_options: dict[str, Any] | None = None) -> None:
        self.fs, root = fsspec.core.url_to_fs(str(url), **(storage_options or {}))
        self.root = root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)
        if self.local:
            for area in (RAW, TMP):
                Path(self.root, area).mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"Store({self.fs.unstrip_protocol(self.root)!r})"

    # -- addressing ---------------------------------------------------------------------------------------

    def path(self, key: str) -> str:
        """The filesystem path of ``key`` (e.g. ``raw/<sha256>``) inside the store."""
        return f"{self.root}/{key}" if key else self.root

    def url(self, key: str) -> str:
        """A URL for ``key`` that fsspec can open from anywhere."""
        return self.fs.unstrip_protocol(self.path(key))

    @staticmethod
    def raw_key(sha256: str) -> str:
        return f"{RAW}/{sha256}"

    def has_raw(self, sha256: str) -> bool:
        return bool(self.fs.exists(self.path(self.raw_key(sha256))))

    def open_raw(self, sha256: str) -> BinaryIO:
        return self.fs.open(self.path(self.raw_key(sha256)), "rb")

    def local_raw_path(self, sha256: str) -> Path:
        """A local path for readers that need one (PyAV, mcap): only for local stores."""
        if not self.local:
            raise StoreError(f"{self!r} is not local; download the object first")
        return Path(self.path(self.raw_key(sha256)))

    # -- landing ------------------------------------------------------------------------------------------

    def land(self, src_fs: fsspec.AbstractFileSystem, src_path: str) -> Landed:
        """Copy one source into ``raw/<sha256>``, verified, published atomically; idempotent."""
        staging = self.path(f"{TMP}/{uuid.uuid4().hex}")
        try:
            with src_fs.open(src_path, "rb") as src, self.fs.open(staging, "wb") as dst:
                sha256, crc, size = _copy_hashing(src, dst)
                if self.local:
                    dst.flush()
                    os.fsync(dst.fileno())
            self._verify_staged(staging, size, crc)
            key = self.raw_key(sha256)
            created = self._publish(staging, self.path(key))
        except OSError as exc:
            raise StoreError(f"landing {src_path!r} into {self!r} failed: {exc}") from exc
        finally:
            with contextlib.suppress(FileNotFoundError, OSError):
                if self.fs.exists(staging):
                    self.fs.rm(staging)
        return Landed(sha256=sha256, size_bytes=size, uri=self.url(key), created=created)

    def _verify_staged(self, staging: str, size: int, crc: int) -> None:
        """Re-read the staged bytes and check them against what was written."""
        actual_size = 0
        actual_crc = 0
        with self.fs.open(staging, "rb") as f:
            while block := f.read(BLOCK_BYTES):
                actual_size += len(block)
                actual_crc = google_crc32c.extend(actual_crc, block)
        if actual_size != size or actual_crc != crc:
            raise StoreError(
                f"staged copy {staging} does not read back as written: "
                f"{actual_size} bytes crc32c {actual_crc:08x}, expected {size} bytes crc32c {crc:08x}"
            )

    def _publish(self, staging: str, final: str) -> bool:
        """Publish without ever overwriting an object; return whether this call created it."""
        if self.local:
            try:
                os.link(staging, final)
            except FileExistsError:
                return False
            os.chmod(final, 0o444)  # raw objects are read-only on disk as well as by contract
            _fsync_dir(os.path.dirname(final))
            return True
        # Object stores: check, then move. Two racing landers write identical bytes under the same key, so
        # the loser's overwrite changes nothing; a store with conditional puts can make this strict.
        if self.fs.exists(final):
            return False
        self.fs.mv(staging, final)
        return True

    # -- scrub --------------------------------------------------------------------------------------------

    def scrub(self, expected: Iterable[tuple[str, int]]) -> Iterator[ScrubFinding]:
        """Re-hash stored raw objects; yield one finding per object that is missing or changed."""
        for sha256, size_bytes in expected:
            key = self.raw_key(sha256)
            path = self.path(key)
            if not self.fs.exists(path):
                yield ScrubFinding(sha256, self.url(key), "missing", "object not found in the store")
                continue
            digest = hashlib.sha256()
            actual = 0
            with self.fs.open(path, "rb") as f:
                while block := f.read(BLOCK_BYTES):
                    digest.update(block)
                    actual += len(block)
            if actual != size_bytes:
                yield ScrubFinding(sha256, self.url(key), "size", f"{actual} bytes, expected {size_bytes}")
            elif digest.hexdigest() != sha256:
                yield ScrubFinding(sha256, self.url(key), "hash", f"sha256 is now {digest.hexdigest()}")


def _copy_hashing(src: BinaryIO, dst: BinaryIO) -> tuple[str, int, int]:
    """Copy ``src`` to ``dst``; sha256 runs on a helper thread while this one writes and CRCs."""
    digest = hashlib.sha256()
    crc = 0
    size = 0
    pending: deque[Future[None]] = deque()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256") as hasher:
        while block := src.read(BLOCK_BYTES):
            # one worker => updates run in submission order
            pending.append(hasher.submit(digest.update, block))
            dst.write(block)
            crc = google_crc32c.extend(crc, block)
            size += len(block)
            if len(pending) >= MAX_BLOCKS_IN_FLIGHT:
                pending.popleft().result()
        for fut in pending:
            fut.result()
    return digest.hexdigest(), crc, size


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
