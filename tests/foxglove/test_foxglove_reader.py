"""Transcoded episodes opened with the npm packages Foxglove itself uses (``check_mcap.mjs``): every CRC
(chunks, and the data section's, recomputed), the index, schemas stored once, every ``CompressedVideo``
decoded with the schema embedded in the file and held to ``@foxglove/schemas``, Annex B with SPS/PPS on
every keyframe, no B-frames where Foxglove must play the stream, rising stamps, and the exact JSON time.

The packages are pinned in ``package-lock.json`` beside this file and installed by ``make test``
(``npm ci``); without Node or the installed packages the tests skip and say so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import StampSource, TopicContract, TranscodeOptions
from pipeline.synth.calibration import make_calibration
from pipeline.synth.flavors import flavor
from pipeline.synth.robot import EpisodeMedia, EpisodeSpec, write_episode
from pipeline.transcode import Provenance, RobotTranscodeConfig, transcode_episode

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "check_mcap.mjs"
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="Node is not on PATH (make test needs it for Foxglove's reader)"),
    pytest.mark.skipif(
        not (HERE / "node_modules" / "@mcap" / "core").is_dir(),
        reason="Foxglove's packages are not installed: `make test` runs `npm ci` in tests/foxglove",
    ),
]

START_NS = 1_748_851_200_000_000_000


def _source(path: Path, name: str) -> Path:
    calibration = make_calibration(0, 0, "rb01", 0, 128, 96)
    spec = EpisodeSpec("rb01", "s", "e", "t", "o", START_NS + 123_457, 1.5, 3, calibration)
    write_episode(path, spec, EpisodeMedia(width=128, height=96, flavor=name))
    return path


def _contract(name: str) -> TopicContract:
    shape = flavor(name)
    ros = shape.ros2
    cameras = [
        {
            "name": c,
            "topic": shape.camera_topic(c),
            "rate_hz": 30,
            "message_encodings": ["cdr" if ros else "protobuf"],
            "stamp_field": "header.stamp" if ros and shape.camera != "video" else "timestamp",
        }
        for c in ("front", "wrist_left", "wrist_right")
    ]
    series = [
        {"topic": t, "rate_hz": 50, "message_encodings": ["cdr" if ros else "json"]}
        for t in (shape.state_topics[:1] + shape.action_topics[:1])
    ]
    return TopicContract.model_validate({"cameras": cameras, "state": series[:1], "actions": series[1:]})


def check(path: Path) -> dict[str, Any]:
    assert NODE is not None
    done = subprocess.run(
        [NODE, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=300, cwd=HERE
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def transcoded(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    cache: dict[tuple[str, str], Path] = {}

    def make(name: str, profile: str) -> Path:
        if (name, profile) not in cache:
            root = tmp_path_factory.mktemp(f"{name}-{profile}")
            config = RobotTranscodeConfig(
                TranscodeOptions.model_validate({"profile": profile}), _contract(name), StampSource.HARDWARE
            )
            out = root / "episode.mcap"
            transcode_episode(
                _source(root / "source.mcap", name), out, config, Provenance("a" * 64, "b", "c")
            )
            cache[(name, profile)] = out
        return cache[(name, profile)]

    return make


@pytest.mark.parametrize(
    ("name", "profile"),
    [("default", "vla"), ("ros2-jpeg", "vla"), ("ros2-raw", "world_model"), ("foxglove-h265", "vla"),
     ("ros2-png", "random_access")],
)  # fmt: skip
def test_foxglove_reads_every_transcoded_episode(
    transcoded: Callable[[str, str], Path], name: str, profile: str
) -> None:
    found = check(transcoded(name, profile))
    assert found["done"] is True  # the stream reader reached the footer, every chunk CRC checked
    assert found["dataSectionCrc"] != 0 and found["dataSectionCrcOk"] is True
    assert found["indexedMessages"] == found["messages"] > 0
    assert found["duplicateSchemas"] == 0
    assert found["profile"] == profile
    cameras = found["cameras"]
    assert sorted(cameras) == sorted(
        flavor(name).camera_topic(c) for c in ("front", "wrist_left", "wrist_right")
    )
    for topic, camera in cameras.items():
        assert camera["formats"] == ["h264"], topic
        assert camera["foreignFields"] == [], topic  # decoded fields are all @foxglove/schemas' own
        assert camera["notAnnexB"] == 0 and camera["frames"] == 45, topic
        assert camera["keyframes"] >= 1 and camera["keyframesWithoutParameterSets"] == 0, topic
        if profile != "random_access":  # Foxglove-viewable: closed GOPs, no B-frames, stamps rising
            assert camera["sliceTypes"].get("I", 0) == camera["keyframes"], topic
            assert set(camera["sliceTypes"]) <= {"I", "P"}, topic
            assert camera["stampsIncreasing"] is True, topic
        else:
            # the dependency-decoupled layout: an open GOP, so one IDR and then a non-IDR I anchor every
            # gop_frames frames, with B-frames between (decode order is not display order)
            gop = TranscodeOptions.model_validate({"profile": profile}).gop_frames
            assert camera["keyframes"] == 1, topic
            assert camera["sliceTypes"].get("I", 0) == -(-45 // gop), topic
            assert camera["sliceTypes"].get("B", 0) > 0, topic
    resampled = {t: j for t, j in found["json"].items() if t.endswith("/resampled")}
    assert resampled
    for topic, entry in resampled.items():
        # the {sec, nsec} time is exact as a JavaScript reader parses it, whatever the double does
        assert entry["exactTimes"] == entry["messages"] > 0, topic


def test_stamps_past_2_53_are_exact_only_through_the_time_object(
    transcoded: Callable[[str, str], Path],
) -> None:
    """ns since the epoch are ~1.7e18, past 2^53: a double holds only every 256th ns there, so an integer
    stamp_ns read by JavaScript's JSON.parse is usually rounded. The resampled records' {sec, nsec} stays
    exact (asserted above); the native JSON streams, whose hardware stamps are arbitrary, show the loss."""
    found = check(transcoded("default", "vla"))
    native = found["json"]["/robot/joint_states"]
    assert native["stampNs"] == native["messages"] > 0
    assert native["stampNsAsDoubleExact"] < native["messages"] / 2
