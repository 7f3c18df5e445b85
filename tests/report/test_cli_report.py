"""``sluice report RUN`` writes the file named, or one named after the run in the home's reports folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner
from world import World

from pipeline.catalog.roles import RoleUrls
from pipeline.cli import report
from pipeline.report.html import remote_references

pytestmark = pytest.mark.integration


def test_report_command_writes_an_offline_file(world: World, role_urls: RoleUrls, tmp_path: Path) -> None:
    app = typer.Typer()
    app.command("report")(report.command)
    app.command("noop")(lambda: None)  # two commands: typer keeps "report" as a subcommand name
    env = {"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DATABASE_URL": role_urls.reader_url}
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", "latest", "--out", str(out)], env=env)
    assert result.exit_code == 0, result.output
    assert "report written to" in result.output and remote_references(out.read_text()) == []
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(app, ["report", str(world.runs["robot"])], env=env)
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    # Not into the working directory (often the clone): into the home's reports folder, path printed.
    assert not (tmp_path / f"sluice-run-{world.runs['robot']}.html").exists()
    written = tmp_path / "home" / "reports" / f"sluice-run-{world.runs['robot']}.html"
    assert written.exists() and str(written) in result.output.replace("\n", "")
