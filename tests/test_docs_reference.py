"""The generated references in docs/ match the code: regenerate and diff."""

from __future__ import annotations

from pathlib import Path

from pipeline.docsgen import generate
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
