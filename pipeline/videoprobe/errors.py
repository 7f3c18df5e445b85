"""Errors of the video probe (rooted in :mod:`pipeline.errors`) and the path text they quote."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.errors import InfrastructureError, StoreError


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as storable text: file-name bytes that are not UTF-8 become ``\\xNN`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


class ProbeWorkerError(InfrastructureError):
    """The probe worker could not be started or answered nonsense: a platform fault, not a bad input."""

    def __init__(self, what: str, stderr_tail: str = "") -> None:
        tail = f"; worker stderr: {stderr_tail}" if stderr_tail else ""
        super().__init__(f"video probe worker {what}{tail}")


class ProbeTargetUnreadableError(StoreError):
    """The file to probe is missing or unreadable to us (lost by the store, or a wrong path)."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        super().__init__(f"cannot probe {display_path(path)!r}: {reason}")
