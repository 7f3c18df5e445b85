"""The object store: a content-addressed, write-once raw area and the derived areas, over fsspec.

Layout under the store root (a local folder by default, any fsspec URL in production)::

    raw/<sha256>                                   landed vendor bytes, never modified or deleted
    derived/<step>/<config hash>/<episode>/...     step outputs
    shards/<dataset>/<version>/...                 WebDataset shards
    manifests/<dataset>/<version>/...              training manifests
    tmp/                                           staging area; nothing here is ever referenced

Landing streams a source once into a staging file under ``tmp/``; sha256 (the identity) is computed on a
helper thread over the very buffers that are written. The staged copy is fsynced, re-read and checked, and
only then published under its hash. The source's size and modification time are compared before and after
the copy: a source that changed while it was read is refused, never published under a hash of a mix.

How the bytes are copied, hashed and verified (around the page cache on a local store, a sampled or
full re-read from the device) is :mod:`pipeline.staging`'s business; see it for what each verify proves.

Publishing on a local store is a hard link, which fails instead of overwriting when the object already
exists, so two landers of the same bytes can race safely. Object stores go through fsspec file objects
and keep a full re-read, checked against a CRC32C of the whole copy.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from pipeline.beneath import Marks, open_beneath
from pipeline.errors import StoreError
from pipeline.staging import (
    BLOCK_BYTES,
    VERIFY_MODES,
    Verify,
    stage_fsspec,
    stage_local,
)

log = logging.getLogger(__name__)

RAW = "raw"
DERIVED = "derived"
SHARDS = "shards"
MANIFESTS = "manifests"
TMP = "tmp"


@functools.cache
def client_errors() -> tuple[type[BaseException], ...]:
    """What the storage clients raise when a store or source cannot be reached or read: OSError (refused
    connections, permission, timeouts; s3fs maps S3's access denied to PermissionError), and the clients'
    own roots for the rest (botocore's missing credentials and unreachable endpoints, aiohttp's HTTP
    errors). A TypeError from bad ``storage_options`` or a bug is none of these and stays what it is."""
    errors: list[type[BaseException]] = [OSError, *_unreachable_errors()]
    with contextlib.suppress(ImportError):
        from botocore.exceptions import ClientError

        errors.append(ClientError)
    return tuple(errors)


@functools.cache
def _unreachable_errors() -> tuple[type[BaseException], ...]:
    """The client errors that say the storage service itself is out of reach (no credentials, an endpoint
    that does not answer), not that one object is: every other object would fail the same way."""
    errors: list[type[BaseException]] = []
    with contextlib.suppress(ImportError):
        from botocore.exceptions import BotoCoreError

        errors.append(BotoCoreError)
    with contextlib.suppress(ImportError):
        from aiohttp import ClientError as HttpClientError

        errors.append(HttpClientError)
    return tuple(errors)


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (a storage client's message can run to a page)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


@dataclass(frozen=True)
class Landed:
    """One source landed in the raw store."""

    sha256: str
    size_bytes: int
    uri: str
    created: bool  # False when the same bytes were already there
    #: What the source looked like while it was read (see :func:`source_state`): what a later run compares
    #: to tell an unchanged file from one to hash again.
    source_state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredObject:
    """An object the catalog records a sha256 for: a raw blob, a derived artifact, a manifest file."""

    kind: str  # "raw", an artifact kind (transcoded_episode, clip, shard, ...), or "manifest_<format>"
    uri: str
    sha256: str
    size_bytes: int


@dataclass(frozen=True)
class ScrubFinding:
    sha256: str
    uri: str
    problem: str  # "missing", "size", "hash", "unreadable"
    detail: str
    kind: str = "raw"


class Store:
    """A store rooted at ``url`` (a local path or any fsspec URL).

    ``verify`` says how much of each staged copy a local store re-reads from the device before publishing
    it: ``"sample"`` (the first and last MiB and a random 1/16 of the rest) or ``"full"`` (every byte);
    see the module docstring for what each proves. Object stores always re-read every byte.
    """

    def __init__(
        self, url: str | Path, storage_options: dict[str, Any] | None = None, *, verify: Verify = "sample"
    ) -> None:
        if verify not in VERIFY_MODES:
            raise StoreError(f"verify={verify!r} is not one of {', '.join(VERIFY_MODES)}")
        self.verify: Verify = verify
        self.fs, root = fsspec.core.url_to_fs(str(url), **(storage_options or {}))
        self.root = root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)
        if self.local:
            from pipeline.paths import make_folder

            for area in (RAW, TMP):
                why_not = make_folder(Path(self.root, area))
                if why_not is not None:  # a store URL naming a file, or where nothing can be made
                    raise StoreError(f"the store's folder {Path(self.root, area)} cannot be made: {why_not}")

    def __repr__(self) -> str:
        return f"Store({self.fs.unstrip_protocol(self.root)!r})"

    # -- addressing ---------------------------------------------------------------------------------------

    def path(self, key: str) -> str:
        """The filesystem path of ``key`` (e.g. ``raw/<sha256>``) inside the store."""
        return f"{self.root}/{key}" if key else self.root

    def url(self, key: str) -> str:
        """A URL for ``key`` that fsspec can open from anywhere."""
        return self.fs.unstrip_protocol(self.path(key))

    def key_of(self, uri: str) -> str | None:
        """The key of ``uri`` inside this store (the inverse of :meth:`url`), or None when it lies elsewhere."""
        path = self.fs._strip_protocol(uri) if "://" in uri else uri
        if self.local:
            path = os.path.normpath(path)
        if path == self.root:
            return ""
        return path[len(self.root) + 1 :] if path.startswith(self.root + "/") else None

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

    def land(self, src_fs: fsspec.AbstractFileSystem, src_path: str, *, root: str | None = None) -> Landed:
        """Copy one source into ``raw/<sha256>``, verified, published atomically; idempotent.

        A local source is opened beneath ``root`` (the vendor root; the file's own folder by default)
        without following links (:func:`pipeline.beneath.open_beneath`), and read through that descriptor
        only: a link swapped in after discovery, a hard link or a FIFO raises
        :class:`~pipeline.beneath.SourceRefusedError` and nothing is copied.
        """
        lineage = staging_lineage(src_fs, src_path)
        if not self.local:
            self._remove_earlier_staging(lineage)
        staging = self.path(f"{TMP}/{lineage}.{uuid.uuid4().hex}")
        try:
            with _open_source(src_fs, src_path, root) as (src, before, state_now):
                if self.local:
                    copied = stage_local(src, staging, before["size"], verify=self.verify)
                else:
                    copied = stage_fsspec(self.fs, src, staging)
                after = state_now()
            if after != before or copied.size_bytes != before["size"]:
                raise StoreError(
                    f"source {src_path!r} changed while it was landed: {before} before, {after} after, "
                    f"{copied.size_bytes} bytes read; nothing was published"
                )
            key = self.raw_key(copied.sha256)
            created = self._publish(staging, self.path(key))
        except OSError as exc:
            raise StoreError(f"landing {src_path!r} into {self!r} failed: {exc}") from exc
        finally:
            with contextlib.suppress(FileNotFoundError, OSError):
                if self.local:
                    os.unlink(staging)
                elif self.fs.exists(staging):
                    self.fs.rm(staging)
        return Landed(
            sha256=copied.sha256,
            size_bytes=copied.size_bytes,
            uri=self.url(key),
            created=created,
            source_state=before,
        )

    def _remove_earlier_staging(self, lineage: str) -> None:
        """Remove the staging copies earlier landings of the same source left behind (object stores).

        A landing removes its staging copy also when it fails, but on an object store that removal is a
        request too: an outage that outlasts the client's retries (``tests/cluster/test_s3_faults.py``)
        leaves the copy under ``tmp/``, and the landing that is retried once the store is back removes it
        here. A landing of the same source running at this very moment (two ingests of one vendor) loses
        its copy and fails before publishing anything; it is retried like any failed item.
        """
        tmp = self.path(TMP)
        self.fs.invalidate_cache(tmp)
        prefix = f"{lineage}."
        # s3fs lists only the keys under tmp/<lineage>. (not every landing's staging copies); other
        # filesystems ignore ``prefix`` and list tmp/, hence the filter
        for name in self.fs.find(tmp, prefix=prefix):
            if not name.rsplit("/", 1)[-1].startswith(prefix):
                continue
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(name)
            log.warning("removed %s, left by an earlier landing of the same source", name)

    def _publish(self, staging: str, final: str) -> bool:
        """Publish without ever overwriting an object; return whether this call created it."""
        if self.local:
            try:
                os.link(staging, final)
            except FileExistsError:
                return False
            os.chmod(final, 0o444)  # raw objects are read-only on disk as well as by contract
            fsync_path(os.path.dirname(final))
            return True
        # Object stores: check, then move. Two racing landers write identical bytes under the same key, so
        # the loser's overwrite changes nothing; a store with conditional puts can make this strict.
        if self.fs.exists(final):
            return False
        self.fs.mv(staging, final)
        return True

    def sweep_staging(self, older_than_s: float) -> list[str]:
        """Remove staging files under ``tmp/`` last modified more than ``older_than_s`` ago; return their paths.

        Landers remove their own staging files, also when they fail; only a killed lander leaves one behind,
        and nothing ever references it. ``older_than_s`` must exceed the longest landing (a staging file's
        modification time moves with every block written), or a live landing loses its staging file and
        fails instead of publishing.
        """
        if older_than_s < 0:
            raise StoreError(f"older_than_s={older_than_s} must be >= 0")
        cutoff = time.time() - older_than_s
        removed = []
        with contextlib.suppress(FileNotFoundError):
            for info in self.fs.ls(self.path(TMP), detail=True):
                modified = _modified_s(info)
                if info.get("type") == "file" and modified is not None and modified < cutoff:
                    with contextlib.suppress(FileNotFoundError):
                        self.fs.rm(info["name"])
                        removed.append(info["name"])
        if removed:
            log.warning("removed %d abandoned staging files from %s", len(removed), self.url(TMP))
        return removed

    # -- scrub --------------------------------------------------------------------------------------------

    def scrub(self, expected: Iterable[StoredObject | tuple[str, int]]) -> Iterator[ScrubFinding]:
        """Re-hash stored objects; yield one finding per object that is missing, unreadable or changed.

        ``expected`` holds :class:`StoredObject` s (read from their URIs: this store's, or any fsspec URL)
        or ``(sha256, size_bytes)`` pairs, which name raw objects of this store.
        """
        for item in expected:
            obj = (
                item
                if isinstance(item, StoredObject)
                else StoredObject("raw", self.url(self.raw_key(item[0])), item[0], item[1])
            )
            finding = self._scrub_one(obj)
            if finding is not None:
                yield finding

    def _scrub_one(self, obj: StoredObject) -> ScrubFinding | None:
        def found(problem: str, detail: str) -> ScrubFinding:
            return ScrubFinding(obj.sha256, obj.uri, problem, detail, obj.kind)

        unreadable: tuple[type[BaseException], ...] = (*client_errors(), ValueError)

        try:
            fs, path = self._fs_of(obj.uri)
            digest = hashlib.sha256()
            actual = 0
            with fs.open(path, "rb") as f:
                while block := f.read(BLOCK_BYTES):
                    digest.update(block)
                    actual += len(block)
        except FileNotFoundError:
            return found("missing", "object not found in the store")
        except _unreachable_errors() as exc:
            # the service is out of reach, not this object: every object would be "unreadable"
            raise StoreError(f"cannot reach {obj.uri} to re-hash it: {first_line(exc)}") from exc
        except unreadable as exc:
            return found("unreadable", f"{type(exc).__name__}: {exc}")
        if actual != obj.size_bytes:
            return found("size", f"{actual} bytes, expected {obj.size_bytes}")
        if digest.hexdigest() != obj.sha256:
            return found("hash", f"sha256 is now {digest.hexdigest()}")
        return None

    def _fs_of(self, uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
        """The filesystem and path of a URI: this store's own filesystem for its own objects."""
        own = self.url("")
        if uri == own or uri.startswith(own.rstrip("/") + "/"):
            return self.fs, self.path(uri[len(own.rstrip("/")) + 1 :])
        fs, path = fsspec.core.url_to_fs(uri)
        return fs, path


# -- helpers ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _open_source(
    src_fs: fsspec.AbstractFileSystem, src_path: str, root: str | None
) -> Iterator[tuple[BinaryIO, dict[str, Any], Callable[[], dict[str, Any]]]]:
    """The source opened for reading, its state as opened, and a function that tells its state now.

    A local file's state comes from its descriptor (what is read is what is described); any other
    filesystem's from fsspec's ``info``.
    """
    if isinstance(src_fs, LocalFileSystem):
        fd, marks = open_beneath(root or os.path.dirname(src_path), src_path)
        with os.fdopen(fd, "rb", buffering=0) as src:
            yield src, marks.as_dict(), lambda: Marks.of(os.fstat(fd)).as_dict()
        return
    before = source_state(src_fs, src_path)
    with src_fs.open(src_path, "rb") as src:
        yield src, before, lambda: source_state(src_fs, src_path)


def staging_lineage(src_fs: fsspec.AbstractFileSystem, src_path: str) -> str:
    """What every staging copy of one source is named after (``tmp/<lineage>.<uuid>``): a hash of its URL,
    so that a retried landing finds the copies its failed attempts left (see ``Store._remove_earlier_staging``)."""
    return hashlib.sha256(src_fs.unstrip_protocol(src_path).encode("utf-8", "surrogateescape")).hexdigest()[
        :32
    ]


#: fsspec ``info`` keys that change whenever an object's content does (a size or a modification time
#: alone does not: a same-size rewrite within the clock's resolution keeps both).
CONTENT_VERSION_KEYS = ("ETag", "etag", "generation", "version_id", "VersionId")


def source_state(src_fs: fsspec.AbstractFileSystem, src_path: str) -> dict[str, Any]:
    """What tells a changed source from an unchanged one.

    Local files: device, inode, size, modification and change time (``ctime`` moves with every write and
    cannot be set back). Other filesystems: the size and whichever version marks fsspec gives.
    """
    if isinstance(src_fs, LocalFileSystem):
        return Marks.of(os.stat(src_path)).as_dict()
    # Remote filesystems answer info() from their listing cache: the listing discovery made would hide a
    # replaced object. Ask the source itself each time.
    src_fs.invalidate_cache(src_path)
    info = src_fs.info(src_path)
    marks = ("size", "mtime", "ino", "LastModified", *CONTENT_VERSION_KEYS)
    return {key: _jsonable(info[key]) for key in marks if info.get(key) is not None} | {
        "size": int(info["size"])
    }


def identifies_content(state: dict[str, Any]) -> bool:
    """Whether an equal ``state`` proves equal content: a local file's ctime, or an object's version."""
    return "ctime_ns" in state or any(key in state for key in CONTENT_VERSION_KEYS)


def _jsonable(value: Any) -> Any:
    """Catalog rows keep states as JSON: datetimes become ISO text."""
    return value.isoformat() if isinstance(value, datetime) else value


def _modified_s(info: dict[str, Any]) -> float | None:
    """A listing entry's modification time in epoch seconds, for the fsspec implementations we use."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, datetime):
            return value.timestamp()
    return None


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Make a file's bytes, or the renames and links inside a folder, durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
