"""Helpers for vendor-config tests: write a vendor file whose source is a throwaway drop folder."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
VENDORS_DIR = REPO_ROOT / "dags" / "vendors"

#: The smallest valid robot-log vendor; ``{root}`` is replaced by the drop folder.
TINY = """\
name: tiny
kind: mcap
source:
  url: {root}
topics:
  state:
    - topic: /robot/joint_states
      rate_hz: 200
      message_encodings: [json]
"""

WriteVendor = Callable[..., Path]


@pytest.fixture
def tiny() -> str:
    """YAML text of the smallest valid robot-log vendor (``{root}`` = the drop folder)."""
    return TINY


@pytest.fixture
def vendors_dir() -> Path:
    """The repository's example vendors."""
    return VENDORS_DIR


@pytest.fixture
def drop(tmp_path: Path) -> Path:
    """The vendor root of the test vendor (an existing folder holding one log: validate lists it)."""
    root = tmp_path / "drop"
    root.mkdir()
    (root / "e000.mcap").write_bytes(b"")
    return root


@pytest.fixture
def write_vendor(tmp_path: Path, drop: Path) -> WriteVendor:
    """Write YAML text (``{root}`` = the drop folder) to ``<tmp>/vendors/<name>.yaml`` and return the path."""

    def write(text: str, name: str = "tiny") -> Path:
        folder = tmp_path / "vendors"
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.yaml"
        path.write_text(textwrap.dedent(text).replace("{root}", str(drop)), encoding="utf-8")
        return path

    return write
