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


def refusal(where: Path, exc: OSError) -> str:
    """Why a filesystem would not write under ``where``, in the words every caller uses."""
    return f"the filesystem of {where} refused it ({exc.strerror})"
