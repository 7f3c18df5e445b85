"""The generated references in docs/ match the code: regenerate and diff."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.docsgen import config_controls, generate, pregate_expectations
from pipeline.enums import ReasonCode

REPO = Path(__file__).resolve().parents[1]


def test_generated_references_are_up_to_date() -> None:
    stale = [
        str(path.relative_to(REPO))
        for path, text in generate(REPO).items()
        if not path.exists() or path.read_text() != text
    ]
    assert stale == [], f"run `sluice docs generate`: stale {stale}"


def test_reference_covers_every_reason_code_and_config_key() -> None:
    docs = generate(REPO)
    reasons = docs[REPO / "docs/reference/reason-codes.md"]
    assert all(f"`{code.value}`" in reasons for code in ReasonCode)
    config = docs[REPO / "docs/reference/vendor-config.md"]
    for key in ("`source.include`", "`quality.pre.max_gap_rate`", "`steps`", "`transcode.profile`"):
        assert key in config


def _row(markdown: str, first_cell: str) -> str:
    rows = [line for line in markdown.splitlines() if line.startswith(f"| {first_cell} |")]
    assert len(rows) == 1, f"{first_cell}: {len(rows)} rows"
    return rows[0]


def test_config_reference_says_which_checks_each_key_tunes() -> None:
    config = generate(REPO)[REPO / "docs/reference/vendor-config.md"]
    gap = _row(config, "`quality.pre.max_gap_rate`")
    assert "`gap_rate_high`" in gap and "quality_pre `max_gap_rate`" in gap
    for key, entries in config_controls().items():
        row = _row(config, f"`{key}`")
        for entry in entries:
            assert f"`{entry.reason.value}`" in row and f"{entry.gate.value} `{entry.check}`" in row, key
    assert _row(config, "`source.url`").count("|") == 5  # sections without controls keep four columns


def test_reason_reference_lists_the_keys_and_checks_behind_each_code() -> None:
    reasons = generate(REPO)[REPO / "docs/reference/reason-codes.md"]
    gap = _row(reasons, "`gap_rate_high`")
    assert "`quality.pre.max_gap_rate`" in gap and "quality_pre `max_gap_rate`" in gap
    for key, entries in config_controls().items():
        for entry in entries:
            assert f"`{key}`" in _row(reasons, f"`{entry.reason.value}`"), (key, entry)
    for gate, check, reason in pregate_expectations():
        assert f"{gate.value} `{check}`" in _row(reasons, f"`{reason.value}`")
    # a code no setting tunes and no suite check raises says so
    assert _row(reasons, "`crc_mismatch`").endswith("| — | — |")


runner = CliRunner(env={"COLUMNS": "200"})  # wide enough that rich does not fold the paths


def _said(output: str) -> str:
    return " ".join(output.replace("│", " ").split())


def test_docs_generate_writes_into_a_checkout_of_the_project(tmp_path: Path) -> None:
    from pipeline.docsgen import project_problem

    assert project_problem(REPO) is None
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "sluice"\n')
    (tmp_path / "docs").mkdir()
    result = runner.invoke(app, ["docs", "generate", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for path, text in generate(tmp_path).items():
        assert path.read_text() == text


def test_docs_generate_refuses_a_root_that_is_not_the_project(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "zz"
    result = runner.invoke(app, ["docs", "generate", "--root", str(missing)])
    assert result.exit_code == 2 and f"--root {missing}: no such directory" in _said(result.output)
    assert not (tmp_path / "nonexistent").exists()
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    result = runner.invoke(app, ["docs", "generate", "--root", str(afile)])
    assert result.exit_code == 2 and f"--root {afile}: a file, not a directory" in _said(result.output)
    other = tmp_path / "other"
    (other / "docs").mkdir(parents=True)
    (other / "pyproject.toml").write_text('[project]\nname = "other"\n')
    result = runner.invoke(app, ["docs", "generate", "--root", str(other)])
    assert result.exit_code == 2 and "not the sluice project" in _said(result.output)
    assert list((other / "docs").iterdir()) == []


def test_docs_generate_refuses_a_current_directory_that_is_not_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["docs", "generate"])
    said = _said(result.output)
    assert result.exit_code == 2 and f"the current directory {tmp_path}: not the sluice project" in said
    assert "pass --root" in said
    assert list(tmp_path.iterdir()) == []
