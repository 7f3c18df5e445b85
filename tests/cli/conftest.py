"""Fixtures of the CLI tests."""

from __future__ import annotations

import pytest
from clirun import Sluice, run


@pytest.fixture
def sluice(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Sluice:
    """Run ``sluice ARGS`` through its entry point with ``env`` set; returns the exit code and output."""
    return lambda args, env: run(args, env, capsys, monkeypatch)
