"""Output paths that cannot be made are one clean error naming the path and why, said before any work starts:
``sluice synth robot|video OUT`` and ``sluice bench NAME --json FILE`` under a regular file or where the
filesystem refuses new entries (``/proc``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.errors import SluiceError

runner = CliRunner(env={"COLUMNS": "200"})  # wide enough that rich does not fold the paths


def clean_error(result: Result, *expected: str) -> None:
    """The command failed as ``sluice`` shows it: a product error (one line, exit 2 through
    :func:`pipeline.cli.main`) or a usage error (exit 2), saying each of ``expected``."""
    if isinstance(result.exception, SluiceError):
        message = str(result.exception)
        assert "\n" not in message, message
    else:
        assert result.exit_code == 2, (result.output, result.exception)
        message = " ".join(result.output.replace("│", " ").split())
    for text in expected:
        assert text in message, message


@pytest.mark.parametrize("kind", ["robot", "video"])
def test_synth_out_under_a_regular_file_says_so(kind: str, afile: Path) -> None:
    result = runner.invoke(app, ["synth", kind, str(afile / "sub"), "--jobs", "1"])
    clean_error(result, f"cannot create output folder {afile / 'sub'}", f"{afile} is a file, not a directory")
    assert afile.read_text() == "not a folder\n"


@pytest.mark.parametrize("kind", ["robot", "video"])
def test_synth_out_the_filesystem_refuses_says_so(kind: str, under_proc: Path) -> None:
    result = runner.invoke(app, ["synth", kind, str(under_proc / "drop"), "--jobs", "1"])
    clean_error(result, f"cannot create output folder {under_proc / 'drop'}", "refused it")


@pytest.fixture
def no_bench_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan bench's work, made to fail the test if it starts: the --json check comes first."""
    from pipeline.bench import plan

    def run(**_: Any) -> dict[str, Any]:
        raise AssertionError("the bench ran before its --json destination was checked")

    monkeypatch.setattr(plan, "run", run)


@pytest.mark.usefixtures("no_bench_run")
def test_bench_json_under_a_regular_file_is_refused_before_the_bench_runs(afile: Path) -> None:
    result = runner.invoke(app, ["bench", "plan", "--size", "small", "--json", str(afile / "x.json")])
    clean_error(result, f"--json {afile / 'x.json'} cannot be written", f"{afile} is a file, not a directory")


@pytest.mark.usefixtures("no_bench_run")
def test_bench_json_that_is_a_directory_or_refused_by_the_filesystem_is_refused_first(
    tmp_path: Path, under_proc: Path
) -> None:
    result = runner.invoke(app, ["bench", "plan", "--size", "small", "--json", str(tmp_path)])
    clean_error(result, f"--json {tmp_path} cannot be written: it is a directory")
    result = runner.invoke(app, ["bench", "plan", "--size", "small", "--json", str(under_proc / "x.json")])
    clean_error(result, f"--json {under_proc / 'x.json'} cannot be written", "refused it")


@pytest.mark.usefixtures("no_bench_run")
def test_bench_json_in_a_folder_that_takes_no_file_is_refused_and_a_refused_option_makes_no_folder(
    tmp_path: Path,
) -> None:
    # sysfs: the folder exists, but not even root may create a file in it
    result = runner.invoke(app, ["bench", "plan", "--size", "small", "--json", "/sys/kernel/x.json"])
    clean_error(
        result, "--json /sys/kernel/x.json cannot be written", "the filesystem of /sys/kernel refused it"
    )
    out = tmp_path / "new" / "x.json"
    result = runner.invoke(app, ["bench", "plan", "--source", "jpeg", "--json", str(out)])
    assert result.exit_code == 2 and "--source is an option of the transcode bench" in result.output
    assert not (tmp_path / "new").exists()  # the options are checked before the destination is made


def test_bench_json_in_a_new_folder_is_written_and_the_check_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.bench import plan

    monkeypatch.setattr(plan, "run", lambda **_: {"speedup": 2.5})
    out = tmp_path / "results" / "new" / "plan.json"
    result = runner.invoke(app, ["bench", "plan", "--size", "small", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["speedup"] == 2.5
    assert [p.name for p in out.parent.iterdir()] == ["plan.json"]
