"""Folders that a command writes into, made or refused in words a user can act on.

A command that writes files (a synthetic drop, a benchmark's results, a proposed vendor file) makes its
folder before any other work, so that a path it cannot write is said at once, naming the part of the path
that is in the way, instead of surfacing later as a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path


def nearest_existing(path: Path) -> Path:
    """``path`` itself when it exists, else its nearest ancestor that does (the root always does). A path
    under a folder this user cannot enter counts as not existing (``os.path.exists``; ``Path.exists``
    raises there)."""
    return next(p for p in (path, *path.absolute().parents) if os.path.exists(p))


def make_folder(folder: Path) -> str | None:
    """Make ``folder`` and its parents; None when it exists or was made, else why not: a file in the way
    (``afile/sub``) or the filesystem's refusal (read-only, permission denied, ``/proc``)."""
    existing = nearest_existing(folder)
    if not os.path.isdir(existing):
        return f"{existing} is a file, not a directory"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return refusal(existing, exc)
    return None


def file_refusal(path: Path) -> str | None:
    """Make the folder of ``path`` and check that it takes a new file there; None when it does, else why
    not: ``path`` is a folder or a read-only file, or :func:`entry_refusal`'s reasons."""
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "the file is read-only"
    return entry_refusal(path)


def entry_refusal(path: Path) -> str | None:
    """Make the folder of ``path`` and check that a new entry (a file, a folder) can be made in it; None when
    it can, else why not: a file is in the way of the folder, or the filesystem refuses a new entry there
    (read-only, permission denied, ``/proc``)."""
    import tempfile

    why_not = make_folder(path.parent)
    if why_not is not None:
        return why_not
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}-probe-"):
            pass
    except OSError as exc:  # a folder that exists but takes no file: read-only, permission denied
        return refusal(path.parent, exc)
    return None


def refusal(where: Path, exc: OSError) -> str:
    """Why a filesystem would not write under ``where``, in the words every caller uses."""
    return f"the filesystem of {where} refused it ({exc.strerror})"
