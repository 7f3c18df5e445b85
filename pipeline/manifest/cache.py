"""The node-local manifest cache: one process per node downloads, every other rank finds the copy there.

An entry is two files named after the manifest's URI: ``<key>.arrow`` (the bytes) and ``<key>.json`` (the
URI, sha256, size and modification time of the verified copy). Every opener takes ``<key>.lock`` (an
OS-level lock, released by the kernel if its holder dies); the first finds no valid entry and downloads,
the others wait on the lock and then find the entry valid.

A download reads the remote file in ranged parts through fsspec, several at a time (``cat_ranges``, which
object stores and HTTP serve concurrently), hashes the parts in order, writes them to a temporary name,
fsyncs, checks the sha256 and publishes by rename. A cached copy is trusted while its size and mtime match
what was recorded when it was verified; ``verify_cached=True`` re-hashes it as well, which catches silent
corruption at the price of reading the whole file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
from filelock import FileLock
from filelock import Timeout as FileLockTimeout

from pipeline.errors import SluiceError
from pipeline.manifest.errors import (
    CacheLockTimeoutError,
    ManifestArgumentError,
    ManifestFetchError,
    ManifestIntegrityError,
    ManifestUnverifiableError,
)
from pipeline.store import fsync_path

log = logging.getLogger(__name__)

#: 8 MiB per ranged read: large enough to amortise a request's latency on an object store, small enough
#: that many can be in flight.
PART_BYTES = 8 << 20
#: Parts requested at once: 8 x 8 MiB = 64 MiB held in memory by the downloading process at most.
PARTS_IN_FLIGHT = 8
#: A 10 GB manifest at a slow 10 MB/s takes ~17 min; waiting longer than this means something is stuck.
DEFAULT_LOCK_TIMEOUT_S = 1800.0
_RECORD_VERSION = 1


@dataclass(frozen=True)
class CachedFile:
    """A verified node-local copy of a manifest."""

    uri: str
    path: Path
    sha256: str
    size_bytes: int
    downloaded: bool  # True when this call fetched the bytes, False when it found them cached


def cache_key(canonical_uri: str) -> str:
    """The file stem of a URI's cache entry (the URI itself may be long or hold any character)."""
    return hashlib.sha256(canonical_uri.encode()).hexdigest()[:32]


def fetch(
    uri: str,
    cache_dir: str | Path,
    *,
    expected_sha256: str | None = None,
    verify_cached: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    storage_options: dict[str, Any] | None = None,
) -> CachedFile:
    """Return a verified local copy of ``uri`` in ``cache_dir``, downloading it if no valid copy is there.

    Safe to call from every rank of a node at once: one downloads under the lock, the others wait and reuse.
    ``expected_sha256`` (from the catalog) is checked on download and on reuse; a mismatch raises
    :class:`ManifestIntegrityError` and publishes nothing.
    """
    # filelock waits forever on a negative timeout, and on NaN until its own check fails deep inside
    if (
        isinstance(lock_timeout_s, bool)
        or not isinstance(lock_timeout_s, numbers.Real)
        or not lock_timeout_s >= 0
    ):
        raise ManifestArgumentError(
            "lock_timeout_s", lock_timeout_s, "seconds >= 0 (float('inf') to wait without a limit)"
        )
    try:
        fs, path = fsspec.core.url_to_fs(uri, **(storage_options or {}))
    except (ValueError, ImportError) as exc:
        raise ManifestFetchError(f"cannot open a filesystem for manifest {uri!r}: {exc}") from exc
    canonical = fs.unstrip_protocol(path)
    cache = Path(cache_dir)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ManifestFetchError(f"cannot create the manifest cache folder {cache}: {exc}") from exc
    key = cache_key(canonical)
    data_path = cache / f"{key}.arrow"
    record_path = cache / f"{key}.json"
    lock = FileLock(str(cache / f"{key}.lock"), timeout=lock_timeout_s)
    try:
        with lock:
            found = _valid_entry(canonical, data_path, record_path, expected_sha256, verify_cached)
            if found is not None:
                return found
            return _download(fs, path, canonical, data_path, record_path, expected_sha256)
    except FileLockTimeout:
        raise CacheLockTimeoutError(lock.lock_file, lock_timeout_s) from None


def recorded_sha256(uri: str, storage_options: dict[str, Any] | None = None) -> str:
    """The sha256 the sums file beside a manifest (:data:`~pipeline.manifest.format.SUMS_FILE_NAME`)
    records for it; :class:`ManifestUnverifiableError` when there is none."""
    from pipeline.manifest.format import SUMS_FILE_NAME, parse_sums

    try:
        fs, path = fsspec.core.url_to_fs(uri, **(storage_options or {}))
    except (ValueError, ImportError) as exc:
        raise ManifestFetchError(f"cannot open a filesystem for manifest {uri!r}: {exc}") from exc
    folder, _, name = path.rpartition("/")
    sums_path = f"{folder}/{SUMS_FILE_NAME}"
    sums_uri = fs.unstrip_protocol(sums_path)
    try:
        text = fs.cat_file(sums_path).decode("utf-8", "replace")
    except FileNotFoundError:
        try:
            manifest_there = fs.exists(path)
        except Exception:  # fsspec backends raise their own types: the sums error stands
            manifest_there = True
        if not manifest_there:  # a wrong path: say that, not that it cannot be verified
            raise ManifestFetchError(f"manifest {uri!r} does not exist") from None
        raise ManifestUnverifiableError(uri, sums_uri, "does not exist") from None
    except Exception as exc:  # fsspec backends raise their own types
        raise ManifestFetchError(f"cannot read {sums_uri!r}: {exc!r}") from exc
    sums = parse_sums(text, sums_uri)
    if name not in sums:
        raise ManifestUnverifiableError(uri, sums_uri, f"does not name {name!r}")
    return sums[name]


def _valid_entry(
    uri: str, data_path: Path, record_path: Path, expected_sha256: str | None, verify_cached: bool
) -> CachedFile | None:
    """The cached entry if it is complete and unchanged since it was verified; None otherwise (with why)."""
    try:
        record = json.loads(record_path.read_text())
        stat = data_path.stat()
    except (OSError, ValueError):
        return None
    reason = None
    if record.get("version") != _RECORD_VERSION or record.get("uri") != uri:
        reason = "record belongs to another URI or format"
    elif stat.st_size != record.get("size_bytes") or stat.st_mtime_ns != record.get("mtime_ns"):
        reason = f"file changed since it was verified ({stat.st_size} bytes, mtime {stat.st_mtime_ns})"
    elif expected_sha256 is not None and record.get("sha256") != expected_sha256:
        reason = f"cached sha256 {record.get('sha256')} is not the expected {expected_sha256}"
    elif verify_cached:
        with open(data_path, "rb") as f:
            actual = hashlib.file_digest(f, "sha256").hexdigest()
        if actual != record.get("sha256"):
            reason = f"cached bytes hash to {actual}, recorded {record.get('sha256')}"
    if reason is not None:
        log.warning(
            "manifest cache entry %s for %s is not usable: %s; downloading again", data_path, uri, reason
        )
        return None
    return CachedFile(uri, data_path, record["sha256"], stat.st_size, downloaded=False)


def _download(
    fs: fsspec.AbstractFileSystem,
    path: str,
    uri: str,
    data_path: Path,
    record_path: Path,
    expected_sha256: str | None,
) -> CachedFile:
    tmp = data_path.with_name(f".{data_path.name}.tmp-{os.getpid()}")
    # Only the lock holder writes here, so leftovers of a holder that died can go.
    for stale in data_path.parent.glob(f".{data_path.name}.tmp-*"):
        stale.unlink(missing_ok=True)
    log.info("downloading manifest %s into %s", uri, data_path)
    try:
        size = fs.size(path)
        digest = hashlib.sha256()
        with open(tmp, "wb") as out:
            if size is None:  # the store cannot tell the size up front: one plain read
                block = fs.cat_file(path)
                digest.update(block)
                out.write(block)
                size = len(block)
            else:
                _copy_ranged(fs, path, int(size), out, digest)
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if expected_sha256 is not None and actual != expected_sha256:
            raise ManifestIntegrityError(uri, expected_sha256, actual)
        # Drop the old record before replacing the bytes: a crash in between leaves no record that could
        # vouch for the new bytes, so the next opener downloads again.
        record_path.unlink(missing_ok=True)
        os.replace(tmp, data_path)
        stat = data_path.stat()
        record = {
            "version": _RECORD_VERSION,
            "uri": uri,
            "sha256": actual,
            "size_bytes": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
        }
        record_tmp = record_path.with_name(f".{record_path.name}.tmp-{os.getpid()}")
        with open(record_tmp, "w") as f:
            f.write(json.dumps(record, sort_keys=True))
            f.flush()
            os.fsync(f.fileno())
        os.replace(record_tmp, record_path)
        fsync_path(data_path.parent)
    except SluiceError:
        raise
    except (FileNotFoundError, PermissionError) as exc:
        raise ManifestFetchError(f"cannot read manifest {uri!r}: {exc}") from exc
    except Exception as exc:  # fsspec backends raise their own types (aiohttp, botocore ...)
        raise ManifestFetchError(f"downloading manifest {uri!r} into {data_path} failed: {exc!r}") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return CachedFile(uri, data_path, actual, stat.st_size, downloaded=True)


def _copy_ranged(fs: fsspec.AbstractFileSystem, path: str, size: int, out: Any, digest: Any) -> None:
    """Fetch ``path`` in parts, ``PARTS_IN_FLIGHT`` at a time, writing and hashing them in order."""
    window_bytes = PART_BYTES * PARTS_IN_FLIGHT
    for window_start in range(0, size, window_bytes):
        starts = list(range(window_start, min(window_start + window_bytes, size), PART_BYTES))
        ends = [min(start + PART_BYTES, size) for start in starts]
        parts = fs.cat_ranges([path] * len(starts), starts, ends, on_error="raise")
        for part, start, end in zip(parts, starts, ends, strict=True):
            if isinstance(part, BaseException):
                raise part
            if len(part) != end - start:
                # e.g. a server that ignores Range and answers with the whole object
                raise ManifestFetchError(
                    f"ranged read of {path!r} bytes {start}-{end} returned {len(part)} bytes, "
                    f"expected {end - start}"
                )
            digest.update(part)
            out.write(part)
