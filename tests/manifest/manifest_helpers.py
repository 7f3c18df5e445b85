"""Helpers of the manifest tests."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pipeline.manifest import format as mf


def record_sums(path: Path) -> Path:
    """Record ``path``'s sha256 in the sums file beside it (as the writer does for its own files), so a
    hand-written IPC file opens with the loader's default verification."""
    sums_path = path.parent / mf.SUMS_FILE_NAME
    sums = mf.parse_sums(sums_path.read_text(), str(sums_path)) if sums_path.exists() else {}
    sums[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    sums_path.write_text(mf.format_sums(sums))
    return path
