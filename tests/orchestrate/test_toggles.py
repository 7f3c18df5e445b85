"""Per-run toggles: defaults from the vendor file, strict keys and values."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import load_vendor
from pipeline.errors import ConfigError
from pipeline.orchestrate import ALLOWED_CONF_KEYS, toggle_description, validate_conf

REPO = Path(__file__).resolve().parents[2]
ACME = load_vendor(REPO / "dags" / "vendors" / "acme_robotics.yaml", base_dir=REPO)


def test_defaults_come_from_the_vendor_file() -> None:
    toggles = validate_conf(ACME, None)
    assert list(toggles) == list(ALLOWED_CONF_KEYS)
    assert toggles == {step.value: config.enabled for step, config in ACME.steps.items()}
    assert toggles["annotate"] is False  # acme switches annotate off by default
    assert validate_conf(ACME, {}) == toggles


def test_a_run_overrides_any_subset() -> None:
    toggles = validate_conf(ACME, {"transcode": False, "annotate": True})
    assert toggles["transcode"] is False and toggles["annotate"] is True
    assert toggles["ingest"] is True


def test_unknown_and_misspelled_keys_fail_listing_the_allowed_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        validate_conf(ACME, {"transcod": False, "colour": "red"})
    problems = dict(caught.value.problems)
    assert set(problems) == {"transcod", "colour"}
    assert "did you mean 'transcode'?" in problems["transcod"]
    assert "did you mean" not in problems["colour"]
    for message in problems.values():
        assert "allowed: ingest, quality_pre, transcode, quality_post, annotate, shard" in message


@pytest.mark.parametrize("value", ["no", 0, None, "false"])
def test_values_must_be_booleans(value: object) -> None:
    with pytest.raises(ConfigError, match="is not a boolean; allowed: true, false"):
        validate_conf(ACME, {"shard": value})


def test_the_trigger_form_says_what_switching_a_step_off_means() -> None:
    from pipeline.enums import StepName

    assert "critical: if it fails, the run fails" in toggle_description(ACME, StepName.TRANSCODE)
    annotate = toggle_description(ACME, StepName.ANNOTATE)
    assert "non-critical" in annotate and "Pool cpu, 1 slot per batch" in annotate


def test_a_run_with_every_step_off_is_refused() -> None:
    # the trigger form, a schedule and `sluice run` all pass through here: such a run would end green and empty
    off = {
        step: False for step in ("ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard")
    }
    with pytest.raises(ConfigError, match="every step is off, so the run would do nothing"):
        validate_conf(ACME, off)
    assert validate_conf(ACME, {**off, "shard": True})["shard"]  # one step is a run
