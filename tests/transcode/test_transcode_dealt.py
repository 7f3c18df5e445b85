"""Cameras dealt over encoder processes and encoded at once in threads: order, errors, same frames."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from transcode_helpers import config_for

from pipeline.config import TrainingProfile
from pipeline.enums import ReasonCode
from pipeline.families import CameraFrames, FrameKind, FramePayload
from pipeline.transcode import TranscodeInputError
from pipeline.transcode.cameras import CameraJob, deal, encode_camera, encode_cameras, run_concurrently
from pipeline.transcode.profiles import EncoderSettings
from pipeline.transcode.source import read_source


def test_deal_spreads_items_round_robin_over_at_most_the_hands_given() -> None:
    assert deal(["a", "b", "c"], 2) == [["a", "c"], ["b"]]
    assert deal(["a", "b"], 8) == [["a"], ["b"]]
    assert deal(["a", "b", "c"], 1) == [["a", "b", "c"]]
    assert deal(["a", "b", "c"], 0) == [["a", "b", "c"]]


def test_run_concurrently_keeps_order_runs_items_at_once_and_raises_the_error() -> None:
    together = threading.Barrier(3, timeout=10)  # breaks unless all three items run at the same time

    def meet(k: int) -> int:
        together.wait()
        return k * k

    assert run_concurrently(meet, [0, 1, 2]) == [0, 1, 4]

    def work(k: int) -> int:
        if k == 3:
            raise ValueError("item 3")
        return k

    with pytest.raises(ValueError, match="item 3"):
        run_concurrently(work, [1, 2, 3])


def test_cameras_encoded_at_once_give_the_bytes_of_one_at_a_time(source_episode: Path) -> None:
    config = config_for(TrainingProfile.VLA)
    episode = read_source(source_episode, config.contract, config.truth)
    settings = EncoderSettings.from_options(config.options)
    jobs = [CameraJob(c.name, c.frames, c.rate, settings) for c in episode.cameras]
    alone = [encode_camera(job) for job in jobs]
    together = encode_cameras(jobs)
    assert [c.name for c in together] == [j.name for j in jobs]
    assert together == alone


def test_a_bad_camera_in_an_encoder_process_is_a_rejection_and_the_pool_goes_on(
    source_episode: Path,
) -> None:
    # the error crosses the process boundary whole (reason code and all), so the step records a rejection
    # instead of a broken pool failing this episode and every later one
    config = config_for(TrainingProfile.VLA)
    episode = read_source(source_episode, config.contract, config.truth)
    settings = EncoderSettings.from_options(config.options)
    good = CameraJob(episode.cameras[0].name, episode.cameras[0].frames, episode.cameras[0].rate, settings)
    garbage = FramePayload("h264", b"\x00\x00\x01\x65" + b"\xff" * 64)
    bad = CameraJob("front", CameraFrames(FrameKind.VIDEO, "h264", 3, (garbage,) * 3), good.rate, settings)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with pytest.raises(TranscodeInputError) as caught:
            pool.submit(encode_cameras, [bad]).result()
        assert caught.value.code in {ReasonCode.DECODE_ERROR, ReasonCode.TOO_FEW_FRAMES}
        assert "camera front" in caught.value.detail
        assert pool.submit(encode_cameras, [good]).result()[0].decoded_frames == good.frames.count


def test_a_missing_state_stream_found_while_the_cameras_encode_is_a_rejection_and_the_pool_goes_on(
    source_episode: Path, tmp_path: Path
) -> None:
    # the cameras are submitted after the first pass; the state streams are decoded while they encode, so
    # a required stream that is absent is found with encodes in flight: the episode must still end as a
    # rejection with its reason, and the pool must still encode the next episode
    from transcode_helpers import PROVENANCE, rewrite

    from pipeline.transcode import transcode_episode

    config = config_for(TrainingProfile.VLA)
    state = config.contract.state[0]
    assert state.required
    without = rewrite(
        source_episode,
        tmp_path / "no-state.mcap",
        lambda channel, message: [] if channel.topic == state.topic else [message.data],
    )
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        with pytest.raises(TranscodeInputError, match=f"no messages on {state.topic}") as caught:
            transcode_episode(
                without,
                tmp_path / "bad" / "episode.mcap",
                config,
                PROVENANCE,
                executor=pool,
                executor_workers=2,
            )
        assert caught.value.code is ReasonCode.MISSING_REQUIRED_TOPIC
        assert not (tmp_path / "bad" / "episode.mcap").exists()
        good = transcode_episode(
            source_episode,
            tmp_path / "good" / "episode.mcap",
            config,
            PROVENANCE,
            executor=pool,
            executor_workers=2,
        )
        assert [c.frames for c in good.cameras] == [c.source_frames for c in good.cameras]
