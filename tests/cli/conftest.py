"""Fixtures of the CLI tests."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from clirun import Sluice, run

PROC = Path("/proc")


@pytest.fixture
def sluice(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Sluice:
    """Run ``sluice ARGS`` through its entry point with ``env`` set; returns the exit code and output."""
    return lambda args, env: run(args, env, capsys, monkeypatch)


@pytest.fixture
def afile(tmp_path: Path) -> Path:
    """A file where a folder is wanted."""
    path = tmp_path / "afile"
    path.write_text("not a folder\n")
    return path


@pytest.fixture
def under_proc() -> Path:
    """A path under /proc, where no file or folder can be made."""
    if not PROC.is_dir():
        pytest.skip("no /proc")
    return PROC / f"sluice-test-{uuid.uuid4().hex}"
