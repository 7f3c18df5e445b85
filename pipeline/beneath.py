"""Open a file beneath a root folder without following any link, so that what is read is what was checked.

Discovery looks at a vendor drop once; landing opens the file later. In between, whoever can write the drop
may replace the file, or a folder on its path, with a symbolic link to somewhere else (``/etc/shadow``), or
hard-link a file from outside into the drop. Opening the path by name would follow the link. Instead the
root is opened, then each component below it relative to the folder opened before it, with ``O_NOFOLLOW``
(``openat``), so no link is followed anywhere on the way. The file opened must be a regular file with a
single link (a second name may live outside the root), and the kernel's own name for the descriptor
(``/proc/self/fd``) must lie under the root. Everything after that reads the descriptor, never the path:
the bytes hashed are the bytes of the file that was checked.

A symbolic link *inside* the drop that points at a file inside the drop is allowed: the path is resolved
first, checked to be under the root, and its resolved components are then opened as above.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.enums import PassOverReason, ReasonCode
from pipeline.errors import InputError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after discovery must not hang the open (it makes no difference to reads
# of a regular file).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class SourceRefusedError(InputError):
    """A source file that may not be landed; ``why`` says which rule it broke."""

    def __init__(self, path: str, why: PassOverReason | str, detail: str) -> None:
        self.path = path
        self.why = PassOverReason(why)
        super().__init__(ReasonCode.OUTSIDE_VENDOR_ROOT.value, f"{path}: {self.why.value}: {detail}")


@dataclass(frozen=True)
class Marks:
    """What tells an unchanged local file from a changed one: a write moves ``ctime_ns`` (and nobody can
    set it back), a replacement changes ``ino``."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Marks:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dev": self.dev,
            "ino": self.ino,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "ctime_ns": self.ctime_ns,
        }


def resolve_beneath(root: str, path: str) -> tuple[str, str]:
    """(real root, the path's resolved location relative to it); raises if it resolves outside."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real, real_root]) != real_root or real == real_root:
        raise SourceRefusedError(
            path, PassOverReason.OUTSIDE_ROOT, f"resolves to {real}, outside {real_root}"
        )
    return real_root, os.path.relpath(real, real_root)


def open_beneath(root: str, path: str) -> tuple[int, Marks]:
    """Open ``path`` (a file under ``root``, possibly through links inside it) for reading; returns the
    descriptor (the caller closes it) and the file's :class:`Marks` as opened.

    Raises :class:`SourceRefusedError` when the file resolves outside the root, a link appears on the way,
    the file is not a regular file or has more than one link, or it cannot be opened.
    """
    real_root, relative = resolve_beneath(root, path)
    parts = Path(relative).parts
    if any(part in ("..", ".") for part in parts):
        raise SourceRefusedError(path, PassOverReason.OUTSIDE_ROOT, f"{relative!r} leaves the root")
    fd = _open(path, real_root, _DIR_FLAGS, None)
    try:
        for part in parts[:-1]:
            next_fd = _open(path, part, _DIR_FLAGS, fd)
            os.close(fd)
            fd = next_fd
        file_fd = _open(path, parts[-1], _FILE_FLAGS, fd)
    finally:
        os.close(fd)
    try:
        st = os.fstat(file_fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceRefusedError(path, PassOverReason.NOT_REGULAR, "not a regular file")
        if st.st_nlink != 1:
            raise SourceRefusedError(
                path, PassOverReason.HARD_LINK, f"has {st.st_nlink} names; another may lie outside the root"
            )
        _check_descriptor(path, file_fd, real_root)
    except BaseException:
        os.close(file_fd)
        raise
    return file_fd, Marks.of(st)


def _open(path: str, name: str, flags: int, dir_fd: int | None) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SourceRefusedError(
                path, PassOverReason.LINK, f"{name!r} became a link or stopped being a folder after discovery"
            ) from None
        if exc.errno == errno.ENXIO:  # a FIFO without a writer, a socket
            raise SourceRefusedError(path, PassOverReason.NOT_REGULAR, "not a regular file") from None
        raise SourceRefusedError(
            path, PassOverReason.UNREADABLE, f"cannot open {name!r}: {exc.strerror}"
        ) from None


def _check_descriptor(path: str, fd: int, real_root: str) -> None:
    """The kernel's name of the opened file must lie under the root (belt and braces: the walk above
    already guarantees it, unless a bind mount or a rename of a parent moved things meanwhile)."""
    with contextlib.suppress(FileNotFoundError):  # no /proc: the walk is the guarantee
        actual = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.commonpath([actual, real_root]) != real_root:
            raise SourceRefusedError(
                path, PassOverReason.OUTSIDE_ROOT, f"opened {actual}, outside {real_root}"
            )
