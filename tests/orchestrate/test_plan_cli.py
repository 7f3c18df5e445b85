"""``sluice plan VENDOR`` prints how the current drop would be batched, without recording anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from orchestrate_helpers import write_vendor
from typer.testing import CliRunner

from pipeline.cli import plan


def test_plan_shows_every_ready_file_in_one_batch(
    tmp_path: Path, drop: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_vendor(tmp_path, drop)
    monkeypatch.setenv("SLUICE_VENDORS_DIR", str(tmp_path))
    monkeypatch.setenv("SLUICE_HOME", str(tmp_path / "home"))
    app = typer.Typer()
    app.command()(plan.command)
    result = CliRunner().invoke(app, ["tiny_vendor", "--no-settle", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["k"] == 2 and len(shown["batches"]) == 2
    assert sorted(f for b in shown["batches"] for f in b["files"]) == [f"part_{i}.mcap" for i in range(5)]
    assert not (tmp_path / "home").exists()  # nothing recorded
