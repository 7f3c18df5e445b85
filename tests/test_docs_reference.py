"""The generated references in docs/ match the code: regenerate and diff."""

from __future__ import annotations

from pathlib import Path

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
