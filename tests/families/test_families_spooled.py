"""Every camera family transcoded in encoder processes, the pictures handed to them through spools while
the source is read: the same bytes as a transcode in one process, and every rejection still a rejection
with its reason, the pool going on afterwards."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import multiprocessing
import os
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from family_helpers import CAMERAS, contract, with_absent_camera, write_flavored
from mcap.reader import make_reader
from mcap.records import Channel, Message
from mcap.writer import IndexType, Writer

from pipeline.config import StampSource, TopicContract, TranscodeOptions
from pipeline.enums import ReasonCode
from pipeline.mcaplog.rewrite import rewrite_with_stock_writer
from pipeline.synth.flavors import FLAVOR_NAMES, flavor
from pipeline.synth.robot import EpisodeTweaks
from pipeline.transcode import Provenance, RobotTranscodeConfig, TranscodeResult, transcode_episode
from pipeline.transcode.errors import TranscodeInputError
from pipeline.transcode.source import SourceReader

PROVENANCE = Provenance("ab" * 32, "cd" * 32, "test")


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as executor:
        yield executor


@pytest.fixture(autouse=True)
def own_temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The spools go to the temp dir: one of this test's own, so that a spool left behind is seen."""
    spools = tmp_path / "tmp"
    spools.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spools))
    return spools


def _config(name: str, truth: StampSource = StampSource.HARDWARE, **kwargs: Any) -> RobotTranscodeConfig:
    options = TranscodeOptions.model_validate({"profile": "vla"})
    return RobotTranscodeConfig(options, contract(name, **kwargs), truth)


def _both(
    source: Path, config: RobotTranscodeConfig, out: Path, executor: Executor
) -> tuple[TranscodeResult, TranscodeResult]:
    alone = transcode_episode(source, out / "alone" / "episode.mcap", config, PROVENANCE)
    pooled = transcode_episode(
        source, out / "pooled" / "episode.mcap", config, PROVENANCE, executor=executor, executor_workers=2
    )
    return alone, pooled


def _retimed(source: Path, out: Path, topic: str, publish_ns: Callable[[int, int], int]) -> Path:
    """``source`` with the publish times of ``topic``'s messages replaced (index on the topic, time)."""
    seen = [0]

    def edit(channel: Channel, message: Message) -> list[Message]:
        if channel.topic != topic:
            return [message]
        seen[0] += 1
        return [dataclasses.replace(message, publish_time=publish_ns(seen[0] - 1, message.publish_time))]

    return rewrite_with_stock_writer(source, out, edit=edit, log_time_order=False)


@pytest.mark.parametrize("name", FLAVOR_NAMES)
def test_each_camera_family_in_encoder_processes_gives_the_bytes_of_one_process(
    tmp_path: Path, name: str, pool: ProcessPoolExecutor, own_temp_dir: Path
) -> None:
    source = write_flavored(tmp_path / "source.mcap", name)
    config = _config(name)
    # every camera but raw pixels goes through a spool (an encoder reads raw pixels from the log itself)
    planned = SourceReader(source, config.contract, config.truth).plan()
    assert (planned is None) == (flavor(name).camera == "raw")
    alone, pooled = _both(source, config, tmp_path, pool)
    assert pooled.sha256 == alone.sha256
    assert [c.frames for c in pooled.cameras] == [c.source_frames for c in pooled.cameras]
    assert list(own_temp_dir.iterdir()) == []  # the spools are gone


def test_still_images_out_of_stamp_order_are_encoded_in_stamp_order(
    tmp_path: Path, pool: ProcessPoolExecutor, own_temp_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # pictures 5 and 6 of the front camera swap stamps, picture 9 repeats picture 8's: they cannot be
    # handed over in the order read, so the transcode reads the log first (the bytes of one process)
    source = write_flavored(tmp_path / "source.mcap", "ros2-jpeg")
    topic = flavor("ros2-jpeg").camera_topic("front")
    stamps: dict[int, int] = {}

    def swap(index: int, publish_ns: int) -> int:
        stamps[index] = publish_ns
        return {5: publish_ns + 40_000_000, 6: publish_ns - 40_000_000, 9: stamps.get(8, 0)}.get(
            index, publish_ns
        )

    retimed = _retimed(source, tmp_path / "retimed.mcap", topic, swap)
    config = _config("ros2-jpeg", StampSource.PUBLISH_TIME)
    with caplog.at_level(logging.INFO, logger="pipeline.transcode.encodes"):
        alone, pooled = _both(retimed, config, tmp_path, pool)
    assert "picture 6's stamp is not after picture 5's" in caplog.text
    assert pooled.sha256 == alone.sha256
    front = next(c for c in pooled.cameras if c.name == "front")
    assert front.source_frames == front.frames == 35  # 36 pictures, one stamp twice
    assert list(own_temp_dir.iterdir()) == []


def test_a_log_without_an_index_is_read_before_the_cameras_encode(
    tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    # no statistics and no chunk index: nothing says which cameras the log holds before it is read
    source = write_flavored(tmp_path / "source.mcap", "ros2-jpeg")
    bare = tmp_path / "no-index.mcap"
    with open(source, "rb") as fin, open(bare, "wb") as fout:
        reader = make_reader(fin)
        summary = reader.get_summary()
        assert summary is not None
        writer = Writer(fout, index_types=IndexType.NONE, use_statistics=False, use_summary_offsets=False)
        writer.start()
        schemas = {i: writer.register_schema(s.name, s.encoding, s.data) for i, s in summary.schemas.items()}
        channels = {
            i: writer.register_channel(c.topic, c.message_encoding, schemas[c.schema_id], dict(c.metadata))
            for i, c in summary.channels.items()
        }
        for record in reader.iter_metadata():
            writer.add_metadata(record.name, dict(record.metadata))
        for _, channel, m in reader.iter_messages():
            writer.add_message(channels[channel.id], m.log_time, m.data, m.publish_time, m.sequence)
        writer.finish()
    with open(bare, "rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is None or (summary.statistics is None and not summary.chunk_indexes)
    alone, pooled = _both(bare, _config("ros2-jpeg"), tmp_path, pool)
    assert pooled.sha256 == alone.sha256


def test_a_corrupt_picture_in_encoder_processes_is_a_decode_error_and_the_pool_goes_on(
    tmp_path: Path, pool: ProcessPoolExecutor, own_temp_dir: Path
) -> None:
    tweaks = EpisodeTweaks(corrupt_image_camera="front", corrupt_image_frame=17)
    bad = write_flavored(tmp_path / "bad.mcap", "ros2-jpeg", tweaks=tweaks)
    config = _config("ros2-jpeg")
    with pytest.raises(TranscodeInputError, match="frame 17") as caught:
        transcode_episode(bad, tmp_path / "bad" / "episode.mcap", config, PROVENANCE, executor=pool)
    assert caught.value.code is ReasonCode.DECODE_ERROR
    assert not (tmp_path / "bad" / "episode.mcap").exists()
    good = write_flavored(tmp_path / "good.mcap", "ros2-jpeg")
    alone, pooled = _both(good, config, tmp_path, pool)
    assert pooled.sha256 == alone.sha256
    assert list(own_temp_dir.iterdir()) == []


def test_a_camera_message_that_does_not_decode_stops_the_encoders_and_the_pool_goes_on(
    tmp_path: Path, pool: ProcessPoolExecutor, own_temp_dir: Path
) -> None:
    # found by the source read while the encoders already run on the pictures before it: the spools are
    # withdrawn, the encoders stop, and the episode is rejected with the read's reason
    source = write_flavored(tmp_path / "source.mcap", "ros2-jpeg", seconds=3.0)
    topic = flavor("ros2-jpeg").camera_topic("wrist_left")
    seen = [0]

    def edit(channel: Channel, message: Message) -> list[Message]:
        if channel.topic == topic:
            seen[0] += 1
            if seen[0] == 60:
                return [dataclasses.replace(message, data=b"\x00\x01\x00\x00\xff")]
        return [message]

    bad = rewrite_with_stock_writer(source, tmp_path / "bad.mcap", edit=edit, log_time_order=False)
    config = _config("ros2-jpeg")
    with pytest.raises(TranscodeInputError, match=topic) as caught:
        transcode_episode(bad, tmp_path / "bad" / "episode.mcap", config, PROVENANCE, executor=pool)
    assert caught.value.code is ReasonCode.DECODE_ERROR
    assert list(own_temp_dir.iterdir()) == []
    alone, pooled = _both(source, config, tmp_path, pool)
    assert pooled.sha256 == alone.sha256


def test_missing_cameras_in_encoder_processes(tmp_path: Path, pool: ProcessPoolExecutor) -> None:
    source = write_flavored(tmp_path / "s.mcap", "ros2-jpeg")
    options = TranscodeOptions.model_validate({"profile": "vla"})
    optional = with_absent_camera("ros2-jpeg", required=False)
    config = RobotTranscodeConfig(options, optional, StampSource.HARDWARE)
    alone, pooled = _both(source, config, tmp_path, pool)
    assert [c.name for c in pooled.cameras] == list(CAMERAS)
    assert pooled.sha256 == alone.sha256
    required = RobotTranscodeConfig(
        options, with_absent_camera("ros2-jpeg", required=True), StampSource.HARDWARE
    )
    with pytest.raises(TranscodeInputError, match="no messages on /cam/rear") as caught:
        transcode_episode(source, tmp_path / "out2.mcap", required, PROVENANCE, executor=pool)
    assert caught.value.code is ReasonCode.MISSING_REQUIRED_TOPIC


class _InThisThread(Executor):
    """Runs every task in ``submit`` itself, as an executor without workers does."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller through the future
            future.set_exception(exc)
        return future


def test_an_executor_that_runs_tasks_in_submit_does_not_wait_for_itself(tmp_path: Path) -> None:
    source = write_flavored(tmp_path / "source.mcap", "ros2-png")
    alone, inline = _both(source, _config("ros2-png"), tmp_path, _InThisThread())
    assert inline.sha256 == alone.sha256


def test_without_a_temp_folder_for_spools_the_log_is_read_first(
    tmp_path: Path,
    pool: ProcessPoolExecutor,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = write_flavored(tmp_path / "source.mcap", "ros2-jpeg")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    with caplog.at_level(logging.INFO, logger="pipeline.transcode.encodes"):
        alone, pooled = _both(source, _config("ros2-jpeg"), tmp_path, pool)
    assert "no folder for picture spools" in caplog.text
    assert pooled.sha256 == alone.sha256


def test_one_camera_on_two_processes_decodes_ahead_from_its_spool(
    tmp_path: Path, pool: ProcessPoolExecutor
) -> None:
    # fewer cameras than processes: the encoder decodes in a thread of its own, which reads the spool
    source = write_flavored(tmp_path / "source.mcap", "ros2-h264")
    topics = contract("ros2-h264").model_dump(mode="json")
    topics["cameras"] = topics["cameras"][:1]
    options = TranscodeOptions.model_validate({"profile": "vla"})
    config = RobotTranscodeConfig(options, TopicContract.model_validate(topics), StampSource.HARDWARE)
    alone, pooled = _both(source, config, tmp_path, pool)
    assert [c.name for c in pooled.cameras] == ["front"]
    assert pooled.sha256 == alone.sha256


def test_spools_left_by_a_killed_transcode_are_removed_by_the_next(
    tmp_path: Path, pool: ProcessPoolExecutor, own_temp_dir: Path
) -> None:
    ended = subprocess.Popen(["true"])  # a transcode that was killed: its process id no longer runs
    ended.wait()
    host = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
    orphan = own_temp_dir / f"sluice-spool-{host}-{ended.pid}-x1y2"
    live = own_temp_dir / f"sluice-spool-{host}-{os.getpid()}-x1y2"  # another transcode, still running
    elsewhere = own_temp_dir / f"sluice-spool-0000beef-{ended.pid}-x1y2"  # another host's: not judged here
    for folder in (orphan, live, elsewhere):
        folder.mkdir()
        (folder / "0.spool").write_bytes(b"pictures")
    source = write_flavored(tmp_path / "source.mcap", "ros2-jpeg")
    transcode_episode(
        source, tmp_path / "out" / "episode.mcap", _config("ros2-jpeg"), PROVENANCE, executor=pool
    )
    assert sorted(own_temp_dir.iterdir()) == sorted([live, elsewhere])
