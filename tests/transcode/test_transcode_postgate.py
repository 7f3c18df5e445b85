"""The post-gate passes a clean transcode and catches broken ones: wrong GOP, dropped frames, low PSNR,
a bad resample, a changed file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from mcap.records import Channel, Message
from transcode_helpers import PROVENANCE, config_for, rewrite, vendor_with

from pipeline.config import QualityPost
from pipeline.enums import ReasonCode
from pipeline.transcode import TranscodeResult, transcode_episode
from pipeline.transcode.postgate import CheckOutcome, check_episode

POST = QualityPost()  # 30 dB, no frame may be missing


def by_name(outcomes: list[CheckOutcome]) -> dict[str, CheckOutcome]:
    return {o.name: o for o in outcomes}


@pytest.mark.parametrize("profile", ["vla", "world_model", "random_access"])
def test_a_clean_transcode_passes_every_check(
    profile: str, transcoded: Callable[[str], TranscodeResult], source_episode: Path
) -> None:
    result = transcoded(profile)
    outcomes = by_name(
        check_episode(result.path, source_episode, config_for(profile), POST, expected_sha256=result.sha256)
    )
    assert set(outcomes) == {
        "decode",
        "frame_count",
        "duration",
        "gop",
        "psnr",
        "colour",
        "resample",
        "sha256",
    }
    assert all(o.passed for o in outcomes.values()), [o for o in outcomes.values() if not o.passed]
    psnr = outcomes["psnr"].observed["cameras"]["front"]
    assert psnr["min_db"] >= POST.min_psnr_db and psnr["chroma_min_db"] >= POST.min_psnr_db
    # an untagged camera, read as BT.601 on both sides, its mean chroma kept within a level
    colour = outcomes["colour"].observed["cameras"]["front"]
    assert (colour["source"], colour["output"]) == (["bt601"], ["bt601"])
    assert colour["chroma_shift_max"] < 1.0
    assert outcomes["sha256"].observed["sha256"] == result.sha256


def test_wrong_gop_is_caught(source_episode: Path, tmp_path: Path) -> None:
    broken = transcode_episode(
        source_episode, tmp_path / "e.mcap", config_for("vla", gop_frames=5), PROVENANCE
    )
    outcomes = by_name(check_episode(broken.path, source_episode, config_for("vla"), POST))
    assert not outcomes["gop"].passed and outcomes["gop"].reason is ReasonCode.GOP_MISMATCH
    assert "expects" in (outcomes["gop"].detail or "")
    assert outcomes["psnr"].passed and outcomes["frame_count"].passed


def test_b_frames_where_the_profile_has_none_are_caught(
    transcoded: Callable[[str], TranscodeResult], source_episode: Path
) -> None:
    ddra = transcoded("random_access")
    # The same file judged as a vla output (gop 17 to isolate the B-frames).
    outcomes = by_name(check_episode(ddra.path, source_episode, config_for("vla", gop_frames=17), POST))
    assert outcomes["gop"].reason is ReasonCode.GOP_MISMATCH


@pytest.mark.parametrize("asked, written", [("cabac", "cavlc"), ("cavlc", "cabac")])
def test_an_entropy_coder_other_than_the_profiles_is_caught(
    asked: str, written: str, source_episode: Path, tmp_path: Path
) -> None:
    encoded = transcode_episode(
        source_episode, tmp_path / "e.mcap", config_for("random_access", entropy_coder=written), PROVENANCE
    )
    right = by_name(
        check_episode(encoded.path, source_episode, config_for("random_access", entropy_coder=written), POST)
    )
    assert right["gop"].passed and right["gop"].observed["cameras"]["front"]["entropy_coder"] == [written]
    wrong = by_name(
        check_episode(encoded.path, source_episode, config_for("random_access", entropy_coder=asked), POST)
    )
    assert wrong["gop"].reason is ReasonCode.GOP_MISMATCH
    assert f"asks for {asked}" in (wrong["gop"].detail or "")
    # entropy coding is lossless: the pictures (and so PSNR) are what the QP made them either way
    assert wrong["psnr"].passed


def test_dropped_frames_are_caught(
    transcoded: Callable[[str], TranscodeResult], source_episode: Path, tmp_path: Path
) -> None:
    seen = {"n": 0}

    def drop_two_wrist_frames(channel: Channel, message: Message) -> list[bytes]:
        if channel.topic == "/cam/wrist_left/h264":
            seen["n"] += 1
            if seen["n"] in (40, 45):  # the last GOP: what precedes still decodes
                return []
        return [message.data]

    broken = rewrite(transcoded("vla").path, tmp_path / "dropped.mcap", drop_two_wrist_frames)
    outcomes = by_name(check_episode(broken, source_episode, config_for("vla"), POST))
    assert outcomes["frame_count"].reason is ReasonCode.FRAME_COUNT_MISMATCH
    assert outcomes["frame_count"].observed["cameras"]["wrist_left"] == {
        "source": 45,
        "output": 43,
        "foreign_stamps": 0,
    }
    span = outcomes["duration"].observed["cameras"]["wrist_left"]
    assert span["output_s"] < span["source_s"]  # the last frame went too (one frame: within tolerance)


def test_low_psnr_is_caught(source_episode: Path, tmp_path: Path) -> None:
    blurry = transcode_episode(source_episode, tmp_path / "e.mcap", config_for("vla", crf=51), PROVENANCE)
    outcomes = by_name(check_episode(blurry.path, source_episode, config_for("vla", crf=51), POST))
    assert outcomes["psnr"].reason is ReasonCode.PSNR_BELOW_THRESHOLD
    assert outcomes["psnr"].observed["cameras"]["front"]["min_db"] < POST.min_psnr_db
    assert outcomes["gop"].passed


def test_a_shifted_resample_is_caught(
    transcoded: Callable[[str], TranscodeResult], source_episode: Path, tmp_path: Path
) -> None:
    topic = "/robot/joint_states/resampled"
    records = []

    def collect(channel: Channel, message: Message) -> list[bytes]:
        if channel.topic == topic:
            records.append(json.loads(message.data))
        return [message.data]

    rewrite(transcoded("vla").path, tmp_path / "copy.mcap", collect)
    step = iter(records[1:] + records[-1:])

    def shift_by_one_sample(channel: Channel, message: Message) -> list[bytes]:
        if channel.topic != topic:
            return [message.data]
        record = dict(next(step))
        record["stamp_ns"] = json.loads(message.data)["stamp_ns"]
        return [json.dumps(record).encode()]

    broken = rewrite(transcoded("vla").path, tmp_path / "shifted.mcap", shift_by_one_sample)
    outcomes = by_name(check_episode(broken, source_episode, config_for("vla"), POST))
    assert outcomes["resample"].reason is ReasonCode.RESAMPLE_ERROR
    assert "RMS error" in (outcomes["resample"].detail or "")
    assert outcomes["resample"].observed["topics"][topic]["rmse"]["position"] > POST.max_resample_rmse


def test_a_changed_output_fails_its_recorded_sha256(
    transcoded: Callable[[str], TranscodeResult], source_episode: Path
) -> None:
    result = transcoded("vla")
    outcomes = by_name(
        check_episode(result.path, source_episode, config_for("vla"), POST, expected_sha256="0" * 64)
    )
    assert outcomes["sha256"].reason is ReasonCode.TRANSCODE_FAILED


def test_an_unreadable_output_fails_decode(source_episode: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.mcap"
    bad.write_bytes(b"\x89MCAP0\r\n" + b"\x00" * 100)
    outcomes = check_episode(bad, source_episode, config_for("vla"), POST)
    assert outcomes[0].name == "decode" and outcomes[0].reason is ReasonCode.DECODE_ERROR


def test_vendor_threshold_is_read_from_config() -> None:
    assert vendor_with({"profile": "vla"}).quality.post.min_psnr_db == 30.0
