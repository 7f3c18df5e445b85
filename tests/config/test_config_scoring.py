"""The quality rank and the cascade in the vendor config: validation, what a rank means, and the hash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pipeline.config import AnnotateOptions
from pipeline.config.scoring import QualityRankOptions

REPO_ROOT = Path(__file__).resolve().parents[2]

RANK = {
    "version": "1",
    "tiers": [
        {
            "name": "gold",
            "require": [{"key": "blockiness.ratio", "max": 1.3}, {"key": "quality_visual", "min": 0.5}],
        },
        {"name": "silver", "require": [{"key": "blockiness.ratio", "max": 1.8}]},
    ],
}


def test_first_tier_met_wins_and_the_fallback_says_why() -> None:
    rank = QualityRankOptions.model_validate(RANK)
    assert rank.assign({"blockiness.ratio": 1.1, "quality_visual": 0.9}) == ("gold", [])
    assert rank.assign({"blockiness.ratio": 1.1, "quality_visual": 0.2}) == ("silver", [])
    assert rank.assign({"blockiness.ratio": 2.4}) == ("reject", ["blockiness.ratio 2.4 > max 1.8"])
    # A score nobody measured never earns a rank, and a non-number is not a pass either.
    assert rank.assign({}) == ("reject", ["blockiness.ratio missing"])
    assert rank.assign({"blockiness.ratio": "low"})[1] == ["blockiness.ratio is 'low', not a number"]


@pytest.mark.parametrize(
    ("annotate", "where", "message"),
    [
        (
            {"stages": [{"name": "a", "annotators": ["nope"]}]},
            "stages.0.annotators.0",
            "not in annotate.annotators",
        ),
        (
            {
                "stages": [
                    {"name": "a", "annotators": ["blockiness"]},
                    {"name": "b", "annotators": ["blockiness"]},
                ]
            },
            "stages.1.annotators.0",
            "already in stage 'a'",
        ),
        ({"rank": {**RANK, "fallback": "gold"}}, "rank.tiers.0.name", "named twice"),
        (
            {"rank": {"version": "1", "tiers": [{"name": "g", "require": [{"key": "k"}]}]}},
            "require.0",
            "neither min nor max",
        ),
        (
            {
                "rank": {
                    "version": "1",
                    "tiers": [{"name": "g", "require": [{"key": "k", "min": 2, "max": 1}]}],
                }
            },
            "require.0",
            "above max",
        ),
    ],
)
def test_bad_stages_and_ranks_are_refused_naming_the_key(
    annotate: dict[str, Any], where: str, message: str
) -> None:
    data = {"annotators": {"blockiness": {"version": "1"}}, **annotate}
    with pytest.raises(ValidationError) as info:
        AnnotateOptions.model_validate(data)
    (error,) = info.value.errors()
    path = ".".join(str(part) for part in error["loc"]) + "." + error["msg"].split(":")[0]
    assert message in error["msg"]
    assert where in path.replace("[", ".").replace("]", ""), path


def test_a_changed_threshold_changes_the_annotate_config_hash() -> None:
    import yaml

    from pipeline.config import VendorConfig
    from pipeline.config.hashing import step_config_hash
    from pipeline.enums import StepName

    data = yaml.safe_load((REPO_ROOT / "dags" / "vendors" / "northwind_video.yaml").read_text())
    data["annotate"] = {"annotators": {"blockiness": {"version": "1"}}, "rank": RANK}
    before = step_config_hash(VendorConfig.model_validate(data), StepName.ANNOTATE)
    data["annotate"]["rank"]["tiers"][1]["require"][0]["max"] = 1.9
    after = VendorConfig.model_validate(data)
    assert step_config_hash(after, StepName.ANNOTATE) != before
    assert step_config_hash(after, StepName.TRANSCODE) == step_config_hash(
        VendorConfig.model_validate(data), StepName.TRANSCODE
    )
