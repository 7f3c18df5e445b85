"""Find a vendor's ready files through fsspec, never leaving the vendor root.

A file is a candidate when it matches the vendor's include globs and none of its exclude globs, lies inside
the vendor root once symlinks are resolved, is a regular file with one name (a hard link's other name may
lie outside the root), and is finished: either the vendor's ready marker is present in
its folder, or its size and mtime did not change between two looks ``settle_s`` apart. Everything else is
reported with the reason it was passed over, so that nothing is dropped silently.

Globs follow gitignore's convention: a pattern without ``/`` matches the file name at any depth; a pattern
with ``/`` matches the path relative to the root, where ``**`` spans folders.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from pipeline.enums import PassOverReason
from pipeline.errors import InfrastructureError, SluiceError
from pipeline.store import client_errors, first_line

log = logging.getLogger(__name__)


class SourceMissingError(SluiceError):
    """The vendor's source root does not exist (or is not a folder): a typo in ``source.url``, an unmounted
    volume, a bucket prefix never written. A run must fail on it, never list nothing and succeed."""

    def __init__(self, root: str, *, is_file: bool = False) -> None:
        self.root = root
        said = "is a file, not a folder" if is_file else "does not exist"
        super().__init__(f"source_missing: the vendor's source folder {root} {said}")


class SourceUnreachableError(InfrastructureError):
    """The vendor's source cannot be listed: no credentials for the bucket, a host that does not answer,
    access refused. A platform fault to retry (or to fix in the vendor's ``storage_options``), never an
    empty run."""

    def __init__(self, root: str, detail: str) -> None:
        self.root = root
        self.detail = detail
        super().__init__(f"source_unreachable: the vendor's source {root} cannot be listed: {detail}")


class DiscoveryIssue(StrEnum):
    """Why a discovery gives a run nothing to do. Stored as the ``code`` of a run's warning or failure entry
    (``pipeline_runs.warnings``, a JSON list), so no column holds it and no CHECK mirrors it."""

    SOURCE_MISSING = "source_missing"  # the root does not exist: the run fails
    SOURCE_UNREACHABLE = (
        "source_unreachable"  # the root cannot be listed (credentials, network): the run fails
    )
    SOURCE_EMPTY = "source_empty"  # the root holds no file at all
    NOTHING_SELECTED = "nothing_selected"  # files are there, but the include/exclude globs leave none
    NOTHING_READY = "nothing_ready"  # selected files are there, but every one was passed over


@dataclass(frozen=True)
class Candidate:
    """A finished file ready to land."""

    path: str  # relative to the vendor root, POSIX separators
    full_path: str  # as the filesystem names it
    size_bytes: int
    mtime: float | None


@dataclass(frozen=True)
class PassedOver:
    path: str
    why: PassOverReason
    detail: str

    def as_dict(self) -> dict[str, str]:
        """The record as reports and listings carry it."""
        return {"path": self.path, "why": self.why.value, "detail": self.detail}


@dataclass
class Discovery:
    candidates: list[Candidate] = field(default_factory=list)
    passed_over: list[PassedOver] = field(default_factory=list)
    #: Files under the root that the include/exclude globs left out (ready markers are not counted).
    unselected: int = 0

    @property
    def total_bytes(self) -> int:
        return sum(c.size_bytes for c in self.candidates)

    def emptiness(self, root: str) -> tuple[DiscoveryIssue, str] | None:
        """Why this discovery found nothing to ingest under ``root`` (a code and a sentence naming what was
        there instead), or None when it found candidates. A run records it as a warning: an empty drop can
        be a quiet night, but a wrong glob or a vendor that stopped delivering must not look like one."""
        if self.candidates:
            return None
        if self.passed_over:
            why: dict[str, int] = {}
            for over in self.passed_over:
                why[over.why] = why.get(over.why, 0) + 1
            counts = ", ".join(f"{n} {reason}" for reason, n in sorted(why.items()))
            return DiscoveryIssue.NOTHING_READY, (
                f"{DiscoveryIssue.NOTHING_READY}: none of the {len(self.passed_over)} selected file(s) under "
                f"{root} is ready to ingest ({counts})"
            )
        if self.unselected:
            return DiscoveryIssue.NOTHING_SELECTED, (
                f"{DiscoveryIssue.NOTHING_SELECTED}: {self.unselected} file(s) under {root}, but the source's "
                "include/exclude globs select none of them"
            )
        return DiscoveryIssue.SOURCE_EMPTY, f"{DiscoveryIssue.SOURCE_EMPTY}: no files under {root}"


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    anchored = "/" in pattern.strip("/")
    pat = pattern.strip("/")
    out = []
    i = 0
    while i < len(pat):
        ch = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            end = pat.find("]", i + 1)
            if end == -1:
                out.append(re.escape(ch))
                i += 1
            else:
                body = pat[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end + 1
        else:
            out.append(re.escape(ch))
            i += 1
    body = "".join(out)
    return re.compile(f"{body}\\Z" if anchored else f"(?:.*/)?{body}\\Z", re.DOTALL)


def glob_match(relative_path: str, pattern: str) -> bool:
    """Whether a root-relative POSIX path matches a gitignore-style glob."""
    return _glob_regex(pattern).match(relative_path) is not None


def selected(relative_path: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    if include and not any(glob_match(relative_path, p) for p in include):
        return False
    return not any(glob_match(relative_path, p) for p in exclude)


def discover(
    fs: fsspec.AbstractFileSystem,
    root: str,
    *,
    include: Sequence[str] = ("*",),
    exclude: Sequence[str] = (),
    ready_marker: str | None = None,
    settle_s: float = 2.0,
) -> Discovery:
    """List the finished files under ``root`` that the vendor's globs select.

    ``ready_marker`` names a file (e.g. ``_READY``) whose presence in a folder marks every file in it as
    finished; without it, files must keep their size and mtime across two listings ``settle_s`` apart.
    A root that does not exist raises :class:`SourceMissingError`; one the filesystem cannot list (its
    client raises: no credentials, no connection, access refused) :class:`SourceUnreachableError`.
    """
    root = root.rstrip("/")
    local = isinstance(fs, LocalFileSystem)
    shown = root if local else fs.unstrip_protocol(root)  # errors name s3://bucket/prefix, not bucket/prefix
    with _reaching(shown):
        is_folder = fs.isdir(root)
    if not is_folder:
        with _reaching(shown):
            is_file = fs.isfile(root)
        raise SourceMissingError(shown, is_file=is_file)
    real_root = os.path.realpath(root) if local else root
    result = Discovery()
    first = _listing(fs, root)
    markers = {p.rsplit("/", 1)[0] for p in first if ready_marker and p.rsplit("/", 1)[-1] == ready_marker}
    second = first
    needs_second_look = any(_folder(p) not in markers for p in first)
    if needs_second_look and settle_s > 0:
        time.sleep(settle_s)
        second = _listing(fs, root)
    for full_path in sorted(first):
        rel = _relative(full_path, root)
        name = rel.rsplit("/", 1)[-1]
        if ready_marker and name == ready_marker:
            continue
        if not selected(rel, include, exclude):
            result.unselected += 1
            continue
        info = first[full_path]
        if local:
            refused = _local_refusal(full_path, real_root)
            if refused is not None:
                result.passed_over.append(PassedOver(rel, *refused))
                continue
        if _folder(full_path) not in markers:
            later = second.get(full_path)
            if later is None or (later["size"], later.get("mtime")) != (info["size"], info.get("mtime")):
                result.passed_over.append(
                    PassedOver(
                        rel,
                        PassOverReason.NOT_READY,
                        f"still changing after {settle_s:g} s (size/mtime moved)",
                    )
                )
                continue
        result.candidates.append(Candidate(rel, full_path, int(info["size"]), info.get("mtime")))
    log.info(
        "discovered %d candidates (%d passed over, %d not selected) under %s",
        len(result.candidates),
        len(result.passed_over),
        result.unselected,
        root,
    )
    return result


def _local_refusal(full_path: str, real_root: str) -> tuple[PassOverReason, str] | None:
    """Why a local file may not be landed (it resolves outside the root, is no regular file or has other
    names), or None. Landing checks the same again on the descriptor it opens (:mod:`pipeline.beneath`)."""
    real = os.path.realpath(full_path)
    if os.path.commonpath([real, real_root]) != real_root:
        return PassOverReason.OUTSIDE_ROOT, f"resolves to {real}, outside the vendor root {real_root}"
    try:
        st = os.stat(real)
    except OSError as exc:
        return PassOverReason.UNREADABLE, f"cannot stat: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return PassOverReason.NOT_REGULAR, "not a regular file"
    if st.st_nlink != 1:
        return PassOverReason.HARD_LINK, f"has {st.st_nlink} names; another may lie outside the root"
    return None


@contextlib.contextmanager
def _reaching(root: str) -> Iterator[None]:
    """What a storage client raises while it lists ``root`` (:func:`~pipeline.store.client_errors`) as
    :class:`SourceUnreachableError`, with the client's own words."""
    try:
        yield
    except client_errors() as exc:
        raise SourceUnreachableError(root, first_line(exc)) from exc


def _raise_unless_vanished(exc: BaseException) -> None:
    """A folder that vanished between two listings is passed (what it held was in flux); any other failure
    to list one is raised: a drop's files must not go missing from a listing without a word."""
    if not isinstance(exc, FileNotFoundError):
        raise exc


def _find_all(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, dict[str, Any]]:
    """``fs.find(root, withdirs=False, detail=True)`` with a folder that cannot be listed raised, not
    omitted. fsspec's ``find`` walks folder by folder and omits every folder whose listing fails; its
    ``walk(on_error=...)`` applies the choice to the top folder only (fsspec 2025.x does not pass it down),
    so this walks one level at a time."""
    found: dict[str, dict[str, Any]] = {}
    pending = [root]
    while pending:
        folder = pending.pop()
        for _, dirs, files in fs.walk(folder, maxdepth=1, detail=True, on_error=_raise_unless_vanished):
            found.update({info["name"]: info for info in files.values()})
            pending += [info["name"].rstrip("/") for info in dirs.values()]
    return dict(sorted(found.items()))


def _walks(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs.find`` is fsspec's own, which lists folder by folder through ``walk`` and omits a
    folder it cannot list (s3fs lists a prefix in one call and raises on failure)."""
    from fsspec.asyn import AsyncFileSystem
    from fsspec.spec import AbstractFileSystem

    if isinstance(fs, AsyncFileSystem):
        return type(fs)._find is AsyncFileSystem._find
    return type(fs).find is AbstractFileSystem.find


def _listing(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, dict[str, Any]]:
    with _reaching(root if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(root)):
        found = _find_all(fs, root) if _walks(fs) else fs.find(root, withdirs=False, detail=True)
    listing: dict[str, dict[str, Any]] = {}
    for path, info in found.items():
        mtime: Any = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
        if hasattr(mtime, "timestamp"):
            mtime = mtime.timestamp()
        listing[path] = {"size": int(info.get("size") or 0), "mtime": mtime}
    return listing


def _folder(path: str) -> str:
    return path.rsplit("/", 1)[0]


def _relative(full_path: str, root: str) -> str:
    return str(PurePosixPath(full_path).relative_to(PurePosixPath(root)))
