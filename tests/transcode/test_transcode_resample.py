"""Resampling decides each field's interpolation from every record, and a stream whose records change shape
is a recorded rejection (``schema_drift``), not a crash."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mcap.records import Channel, Message
from transcode_helpers import PROVENANCE, config_for, rewrite

from pipeline.enums import ReasonCode
from pipeline.synth.layout import JOINT_STATE_TOPIC
from pipeline.transcode import TranscodeInputError, transcode_episode
from pipeline.transcode.resample import Series, field_methods, resample


def _series(records: list[dict[str, object]]) -> Series:
    stamps = np.arange(len(records), dtype=np.int64) * 10_000_000  # 100 Hz
    return Series("/robot/joint_states", stamps, records, None)


def test_a_joint_whose_first_sample_is_written_as_0_is_still_interpolated() -> None:
    # JSON writers print 0.0 as 0: the first record alone looks like an integer counter
    first = {"position": [0, 0], "velocity": 0, "gripper": 0.5, "count": 0, "mode": "run"}
    records = [first] + [
        {"position": [0.5 * k, 1.5], "velocity": 0.25 * k, "gripper": 0.5, "count": k, "mode": "run"}
        for k in range(1, 4)
    ]
    methods = field_methods(records, None)
    assert methods == {
        "position": "linear",
        "velocity": "linear",
        "gripper": "previous",  # named as discrete
        "count": "previous",  # integers throughout
        "mode": "previous",
    }
    halfway = resample(_series(records), np.array([5_000_000], dtype=np.int64))  # between samples 0 and 1
    assert halfway.records[0]["position"] == [0.25, 0.75]
    assert halfway.records[0]["velocity"] == 0.125


@pytest.mark.parametrize(
    "records, message",
    [
        ([{"position": 0.5}, {"velocity": 1.0}], "record 1 has no field 'position'"),
        ([{"position": [0.5, 1.0]}, {"position": [0.5, 1.0, 2.0]}], r"numeric vector of \[2, 3\] elements"),
    ],
)
def test_records_that_change_shape_are_a_schema_drift(records: list[dict[str, object]], message: str) -> None:
    with pytest.raises(TranscodeInputError, match=message) as caught:
        resample(_series(records), np.array([0], dtype=np.int64))
    assert caught.value.code is ReasonCode.SCHEMA_DRIFT


def test_a_state_message_that_is_not_a_json_object_is_a_decode_error(
    source_episode: Path, tmp_path: Path
) -> None:
    def as_list(channel: Channel, message: Message) -> list[bytes]:
        if channel.topic != JOINT_STATE_TOPIC:
            return [message.data]
        return [json.dumps(list(json.loads(message.data).values())).encode()]

    broken = rewrite(source_episode, tmp_path / "lists.mcap", as_list)
    with pytest.raises(TranscodeInputError, match="is a JSON list, not an object of fields") as caught:
        transcode_episode(broken, tmp_path / "out" / "episode.mcap", config_for("vla"), PROVENANCE)
    assert caught.value.code is ReasonCode.DECODE_ERROR
    assert not (tmp_path / "out" / "episode.mcap").exists()
