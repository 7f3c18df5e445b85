"""Running ``sluice`` as a user runs it, for the CLI tests: through the console script's entry point
(:func:`pipeline.cli.main`) in this process, with stdout not a terminal, and checking that a failure is one
clean line rather than a traceback. The ``sluice`` fixture (``tests/cli/conftest.py``) wraps :func:`run`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

Sluice = Callable[[list[str], dict[str, str]], subprocess.CompletedProcess[str]]


def run(
    args: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> subprocess.CompletedProcess[str]:
    """``sluice ARGS`` with ``env`` set; the exit code and what it printed."""
    from pipeline.cli import main

    capsys.readouterr()
    with monkeypatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        patch.setattr(sys, "argv", ["sluice", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def clean_error(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    """The command failed with exit 2 and no traceback, its stderr saying each of ``expected`` (rich's
    wrapping of a usage error's box undone)."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr
    said = " ".join(result.stderr.replace("│", " ").split())
    for text in expected:
        assert " ".join(text.split()) in said, result.stderr
