"""``episode_metadata``: where an episode's ids come from when its log has no ``episode`` record."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pipeline.config import EpisodeMetadataSource

LAYOUT = r"^(?P<robot_id>[^/]+)/(?P<session_id>[^/]+)/[^/]+\.mcap$"


def test_the_record_wins_the_path_fills_in_and_fixed_values_come_last() -> None:
    source = EpisodeMetadataSource(path_pattern=LAYOUT, values={"robot_id": "fixed", "task": "pick"})
    assert source.resolve({}, "rb07/2026-05-01/bag_0.mcap") == {
        "robot_id": "rb07",
        "session_id": "2026-05-01",
        "task": "pick",
    }
    # an empty value in the record is no value: the path's stands
    assert source.resolve({"robot_id": "rb01", "session_id": ""}, "rb07/s1/bag_0.mcap") == {
        "robot_id": "rb01",
        "session_id": "s1",
        "task": "pick",
    }
    # a path the pattern does not match gives nothing; nor does an unknown path
    assert source.resolve({}, "flat_file.mcap") == {"robot_id": "fixed", "task": "pick"}
    assert source.resolve({}, None) == {"robot_id": "fixed", "task": "pick"}
    assert EpisodeMetadataSource().resolve({"robot_id": "rb01"}, "rb07/s1/x.mcap") == {"robot_id": "rb01"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"path_pattern": "(?P<robot_id>[^/]+"}, "not a regular expression"),
        ({"path_pattern": "(?P<robot>[^/]+)/"}, "unknown: robot"),
        ({"path_pattern": "([^/]+)/"}, "it names none"),
        ({"values": {"robot": "rb01"}}, "unknown: robot"),
        ({"values": {"robot_id": " "}}, "must not be empty"),
    ],
)
def test_a_pattern_or_value_that_cannot_give_ids_is_a_config_error(
    data: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        EpisodeMetadataSource.model_validate(data)
