"""What a user meets at the command line, run as the user runs it: through the console script's entry point
(:func:`pipeline.cli.main`, in this process, stdout not a terminal; one test runs the installed ``sluice``
script itself): clean errors instead of tracebacks, no silent empty answers, plain columns when piped, help
without markup noise."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clirun import Sluice
from clirun import clean_error as _clean_error

from pipeline.synth import RobotDropConfig, make_robot_drop

pytestmark = pytest.mark.integration

SLUICE = Path(sys.executable).with_name("sluice")


@pytest.fixture
def env(tmp_path: Path, migrated_database_url: str) -> dict[str, str]:
    return {"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DATABASE_URL": migrated_database_url}


def test_missing_and_empty_sources_are_said_not_run_green(
    sluice: Sluice, tmp_path: Path, env: dict[str, str]
) -> None:
    missing = sluice(["ingest", str(tmp_path / "does" / "not" / "exist"), "--kind", "mcap"], env)
    _clean_error(missing, "source_missing", str(tmp_path / "does" / "not" / "exist"))

    empty = tmp_path / "empty"
    empty.mkdir()
    result = sluice(["ingest", str(empty), "--kind", "mcap", "--settle-s", "0", "--json"], env)
    assert result.returncode == 0, result.stderr
    assert f"warning: source_empty: no files under {empty}" in result.stderr
    assert json.loads(result.stdout)["warnings"] == [f"source_empty: no files under {empty}"]

    # `sluice plan` says the same before anything runs, and takes --vendor FILE as ingest does.
    vendor = tmp_path / "vendors" / "quiet.yaml"
    vendor.parent.mkdir()
    vendor.write_text(f"name: quiet\nkind: mcap\nsource: {{url: {empty}, settle_s: 0}}\ntopics: {{}}\n")
    for args in (["plan", str(vendor)], ["plan", "--vendor", str(vendor)]):
        planned = sluice(args, env)
        assert planned.returncode == 0, planned.stderr
        assert "warning: source_empty" in planned.stderr and "0 ready file(s)" in planned.stdout
    vendor.write_text(vendor.read_text().replace(str(empty), str(tmp_path / "typo")))
    _clean_error(sluice(["plan", "--vendor", str(vendor)], env), "source_missing")


def test_bad_filters_are_errors_that_name_the_allowed_values(sluice: Sluice, env: dict[str, str]) -> None:
    bad_state = sluice(["files", "list", "--state", "quarantind"], env)
    assert bad_state.returncode == 2 and "Traceback" not in bad_state.stderr
    assert "'quarantind' is not one of" in bad_state.stderr and "'quarantined'" in bad_state.stderr
    _clean_error(sluice(["files", "list", "--vendor", "nosuch"], env), "unknown vendor 'nosuch'")
    _clean_error(sluice(["quarantine", "list", "--vendor", "nosuch"], env), "unknown vendor 'nosuch'")
    _clean_error(sluice(["status", "--vendor", "nosuch"], env), "unknown vendor 'nosuch'")


def test_a_catalog_that_was_never_migrated_says_run_db_migrate(
    sluice: Sluice, tmp_path: Path, fresh_database_url: Callable[[], str]
) -> None:
    env = {"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DATABASE_URL": fresh_database_url()}
    drop = tmp_path / "drop"
    make_robot_drop(drop, RobotDropConfig(episodes=1, seconds=1, width=64, height=48))
    for args in (["ingest", str(drop), "--kind", "mcap", "--settle-s", "0"], ["files", "list"], ["status"]):
        _clean_error(sluice(args, env), "never migrated", "run `sluice db migrate`")


def test_an_ad_hoc_ingest_leaves_the_sidecars_and_piped_tables_are_plain_columns(
    sluice: Sluice, tmp_path: Path, env: dict[str, str]
) -> None:
    drop = tmp_path / "drop"
    manifest = make_robot_drop(drop, RobotDropConfig(episodes=2, seconds=1, width=64, height=48))
    sidecars = sorted(p.relative_to(drop).as_posix() for p in drop.rglob("*.json"))
    assert "drop.json" in sidecars
    result = sluice(["ingest", str(drop), "--kind", "mcap", "--settle-s", "0", "--json"], env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["discovered"] == len(manifest.files) and report["unselected"] == len(sidecars)
    assert report["states"] == {"accepted": len(manifest.files)}  # no sidecar quarantined as bad_magic

    listed = sluice(["files", "list"], env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["vendor", "path", "state", "reasons", "duplicate_of", "sha256"]
    assert len(lines) == 1 + len(manifest.files)  # one line per file: nothing wrapped, no box drawing
    by_path = {line.split()[1]: line.split() for line in lines[1:]}
    for f in manifest.files:
        assert by_path[f.path][-1] == f.sha256
    assert "source files" in listed.stderr  # the title, off the data stream


def test_bad_settings_and_arguments_are_named_before_anything_is_reached(
    sluice: Sluice, tmp_path: Path
) -> None:
    home = {"SLUICE_HOME": str(tmp_path / "home")}
    warehouse = ["query", "select 1", "--warehouse", str(tmp_path / "w.duckdb")]
    # a SLUICE_* variable that does not validate is named with what it was given, for every command
    _clean_error(
        sluice(warehouse, {**home, "SLUICE_STORE_VERIFY": "bogus"}), "SLUICE_STORE_VERIFY", "'bogus'"
    )
    _clean_error(sluice(["status"], {**home, "SLUICE_DATABASE_URL": "notaurl"}), "SLUICE_DATABASE_URL: not a")
    mysql = sluice(["status"], {**home, "SLUICE_DATABASE_URL": "mysql://me:s3cret@db/x"})
    _clean_error(mysql, "names 'mysql'")
    assert "s3cret" not in mysql.stderr  # a URL's password is not echoed
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    _clean_error(sluice(["status"], {"SLUICE_HOME": str(a_file)}), "SLUICE_HOME", "is a file, not a folder")

    # no local cluster yet: the hint names both steps, in order
    _clean_error(sluice(["files", "list"], home), "run `sluice db up`, then `sluice db migrate`")

    # a warehouse file DuckDB cannot open says so and how to get a good one back
    for bad in (a_file, tmp_path):
        opened = sluice(["query", "select 1", "--warehouse", str(bad)], home)
        _clean_error(opened, "cannot be opened", "sluice warehouse sync")

    _clean_error(
        sluice(["ingest", str(a_file), "--kind", "mcap"], home), "source_missing", "is a file, not a folder"
    )
    # an empty URL is the variable unset for one command: the local cluster's hint, not a settings error
    _clean_error(sluice(["files", "list"], {**home, "SLUICE_DATABASE_URL": ""}), "run `sluice db up`")

    # arguments are checked before the catalog is reached (there is none here)
    drop = tmp_path / "drop"
    drop.mkdir()
    for args, said in (
        (["ingest", str(drop), "--kind", "bogus"], "'bogus' is not a kind"),
        (["ingest", str(drop), "--kind", "mcap", "--executor", "slurm"], "--executor must be one of"),
        (["ingest", str(drop), "--kind", "mcap", "--settle-s", "-5"], "--settle-s must be 0"),
        (["shard", "a@1", "--target-shard-bytes", "lots"], "--target-shard-bytes 'lots'"),
        (["shard", "a@1", "--target-shard-bytes", "0"], "greater than 0"),
        (["plan"], "give a vendor: its name"),
    ):
        result = sluice(args, home)
        assert result.returncode == 2 and "Traceback" not in result.stderr, (args, result.stderr)
        assert said in " ".join(result.stderr.replace("│", " ").split()), (args, result.stderr)


def test_a_source_that_cannot_be_listed_is_named_not_a_traceback(sluice: Sluice, tmp_path: Path) -> None:
    vendor = tmp_path / "far.yaml"
    vendor.write_text(
        "name: far\nkind: mcap\nsource: {url: 'http://127.0.0.1:1/drop', settle_s: 0}\ntopics: {}\n"
    )
    planned = sluice(["plan", str(vendor)], {"SLUICE_HOME": str(tmp_path / "home")})
    _clean_error(planned, "source_unreachable", "127.0.0.1:1/drop cannot be listed", "ClientConnectorError")


def test_plan_names_the_files_it_passes_over_and_why(sluice: Sluice, tmp_path: Path) -> None:
    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / "ok.mcap").write_bytes(b"x" * 1000)
    outside = tmp_path / "elsewhere.mcap"
    outside.write_bytes(b"y" * 10)
    (drop / "link.mcap").symlink_to(outside)
    os.mkfifo(drop / "pipe.mcap")
    vendor = tmp_path / "near.yaml"
    vendor.write_text(f"name: near\nkind: mcap\nsource: {{url: {drop}, settle_s: 0}}\ntopics: {{}}\n")
    home = {"SLUICE_HOME": str(tmp_path / "home")}
    shown = sluice(["plan", str(vendor), "--no-settle"], home)
    assert shown.returncode == 0, shown.stderr
    assert "1 ready file(s)" in shown.stdout and "2 passed over" in shown.stdout
    rows = {line.split()[0]: line.split()[1] for line in shown.stdout.splitlines() if ".mcap" in line}
    assert rows == {"link.mcap": "outside_root", "pipe.mcap": "not_regular"}
    listed = json.loads(sluice(["plan", str(vendor), "--no-settle", "--json"], home).stdout)
    assert {p["path"]: p["why"] for p in listed["passed_over"]} == rows
    assert [f for b in listed["batches"] for f in b["files"]] == ["ok.mcap"]


def test_help_shows_no_bool_labels_or_rst_backticks(sluice: Sluice) -> None:
    for args in (["--help"], ["ingest", "--help"], ["files", "list", "--help"]):
        result = sluice(args, {})
        assert result.returncode == 0, result.stderr
        assert "<bool>" not in result.stdout and "``" not in result.stdout, result.stdout
    assert "--vendor FILE" in sluice(["ingest", "--help"], {}).stdout


def test_the_installed_script_prints_product_errors_without_a_traceback(env: dict[str, str]) -> None:
    result = subprocess.run(
        [str(SLUICE), "files", "list", "--vendor", "nosuch"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    _clean_error(result, "error: unknown vendor 'nosuch'; allowed: (no vendor recorded yet)")


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    yield path, command
    if hasattr(command, "list_commands"):
        ctx = type(command).context_class(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                yield from _commands(sub, [*path, name])


def test_every_placeholder_in_a_help_text_is_shown() -> None:
    """The help is markdown, where a bare ``<sha256>`` is an HTML tag and vanished from ``lineage --help``
    (``blob:, file:/, episode:``): every ``<placeholder>`` a command's or option's help names is shown."""
    import typer
    from typer.testing import CliRunner

    from pipeline.cli import app

    runner = CliRunner()
    checked = 0
    for path, command in _commands(typer.main.get_command(app), []):
        texts = [getattr(p, "help", None) or "" for p in command.params] + [command.help or ""]
        wanted = {m for text in texts for m in re.findall(r"<[a-z][\w|.-]*>", text)}
        if not wanted:
            continue
        shown = runner.invoke(app, [*path, "--help"], terminal_width=250, env={"COLUMNS": "250"}).output
        assert not [w for w in sorted(wanted) if w not in shown], (path, shown)
        checked += 1
    assert checked >= 2  # lineage and synth video name placeholders
