"""The drop manifest (``drop.json``): every file a drop holds, with the defect it carries.

The manifest is the oracle for tests and benchmarks, never an input of ingest: it sits at the drop's root
under a name that vendor globs do not match (see :data:`pipeline.synth.layout.MANIFEST_FILE`). It holds no
wall-clock time, so the same seed and options give a byte-identical manifest.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.enums import FileState, ReasonCode, SourceKind
from pipeline.errors import SluiceError
from pipeline.synth.layout import MANIFEST_FILE

_HASH_BLOCK_BYTES = 1 << 20


class DropFile(BaseModel):
    """One file of a drop and what a correct ingest must make of it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str  # relative to the drop root, POSIX separators
    size_bytes: int
    sha256: str
    defect: str | None
    expected_state: FileState
    expected_reasons: tuple[ReasonCode, ...]
    duplicate_of: str | None = None
    robot_id: str | None = None
    session_id: str | None = None
    episode_id: str | None = None
    calibration_id: str | None = None
    clip_id: str | None = None
    frames: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    message_counts: dict[str, int] | None = None
    details: dict[str, Any] = {}


class DropManifest(BaseModel):
    """Everything ``sluice synth`` made in one drop."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: SourceKind
    generator: str
    options: dict[str, Any]
    total_bytes: int
    files: tuple[DropFile, ...]
    extra_files: tuple[str, ...] = ()  # beside the inputs: calibrations, sidecars

    def by_defect(self, defect: str | None) -> list[DropFile]:
        return [f for f in self.files if f.defect == defect]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def describe_file(
    root: Path,
    path: Path,
    defect: str | None,
    outcome: tuple[FileState, tuple[ReasonCode, ...]],
    info: dict[str, Any],
) -> DropFile:
    """A :class:`DropFile` for a file already written under ``root``."""
    state, reasons = outcome
    return DropFile(
        path=path.relative_to(root).as_posix(),
        size_bytes=path.stat().st_size,
        sha256=sha256_file(path),
        defect=None if defect is None else str(defect),
        expected_state=state,
        expected_reasons=reasons,
        **info,
    )


def write_manifest(root: Path, manifest: DropManifest) -> Path:
    """Write ``drop.json`` at the drop root (sorted keys, so identical drops give identical bytes)."""
    path = root / MANIFEST_FILE
    path.write_text(json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    return path


def read_manifest(root: Path) -> DropManifest:
    """Read a drop's ``drop.json``."""
    return DropManifest.model_validate_json((root / MANIFEST_FILE).read_text())


class SizeError(SluiceError, ValueError):
    def __init__(self, text: str) -> None:
        super().__init__(
            f"size {text!r} not understood; allowed: a byte count or a number with a unit "
            "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 2GB or 500MiB"
        )


_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip


def parse_size(text: str) -> int:
    """Bytes from ``"2GB"``, ``"500MiB"``, ``"1.5gb"`` or ``"1048576"``."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise SizeError(text)
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
