"""Robot-log transcode: Foxglove-readable MCAP, frames back at their stamps, fixed-rate state, topic groups,
deterministic bytes."""

from __future__ import annotations

import contextlib
import gc
import inspect
import json
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import av
import numpy as np
import pytest
from mcap.reader import make_reader
from transcode_helpers import PROVENANCE, camera_messages, config_for, frame_table, source_camera_stamps

from pipeline.media.framecode import read_frame_index
from pipeline.processes import WorkerPool
from pipeline.reader import build_index
from pipeline.transcode import TranscodeResult, transcode_episode
from pipeline.transcode.h264 import access_unit_info, frame_letter
from pipeline.transcode.layout import GROUP_CAMERAS, GROUP_KEY, GROUP_NATIVE, GROUP_PROPRIO
from pipeline.transcode.source import read_source

CAMERA_TOPICS = ("/cam/front/h264", "/cam/wrist_left/h264", "/cam/wrist_right/h264")
PROFILES = ("vla", "world_model", "random_access")


def test_output_opens_with_the_mcap_reader_and_cameras_use_compressed_video(
    transcoded: Callable[[str], TranscodeResult],
) -> None:
    path = transcoded("vla").path
    with open(path, "rb") as fh:
        reader = make_reader(fh, validate_crcs=True)
        summary = reader.get_summary()
        assert summary is not None
        counts: dict[str, int] = {}
        for schema, channel, _ in reader.iter_messages():
            counts[channel.topic] = counts.get(channel.topic, 0) + 1
            if channel.topic in CAMERA_TOPICS:
                assert schema is not None and schema.name == "foxglove.CompressedVideo"
                assert schema.encoding == "protobuf" and channel.message_encoding == "protobuf"
    assert all(counts[t] == 45 for t in CAMERA_TOPICS)  # 1.5 s at 30 Hz
    assert {"/robot/joint_states/resampled", "/robot/action/resampled", "/robot/joint_states"} <= set(counts)
    for topic in CAMERA_TOPICS:
        for message in camera_messages(path, topic):
            assert message.format == "h264" and message.frame_id == topic.split("/")[2]
            assert message.data.startswith((b"\x00\x00\x00\x01", b"\x00\x00\x01"))  # Annex B


@pytest.mark.parametrize("profile", ["vla", "random_access"])
def test_frame_index_in_every_source_frame_comes_back_at_the_same_stamp(
    profile: str, transcoded: Callable[[str], TranscodeResult], source_episode: Path
) -> None:
    path = transcoded(profile).path
    stamps = source_camera_stamps(source_episode, config_for(profile))
    for camera, topic in zip(("front", "wrist_left", "wrist_right"), CAMERA_TOPICS, strict=True):
        messages = camera_messages(path, topic)
        decoder = av.CodecContext.create("h264", "r")
        seen = {}
        for position, message in enumerate(messages):
            packet = av.Packet(message.data)
            packet.pts = position
            for frame in decoder.decode(packet):
                seen[frame.pts] = read_frame_index(frame.to_ndarray(format="rgb24"))
        for frame in decoder.decode(None):
            seen[frame.pts] = read_frame_index(frame.to_ndarray(format="rgb24"))
        assert len(seen) == len(messages) == len(stamps[camera])
        for position, message in enumerate(messages):
            index = seen[position]
            assert message.timestamp.ToNanoseconds() == stamps[camera][index], (camera, position, index)


def test_state_and_actions_are_on_the_fixed_rate_grid_with_native_streams_kept(
    transcoded: Callable[[str], TranscodeResult], source_episode: Path
) -> None:
    path = transcoded("vla").path
    period_ns = 20_000_000  # 50 Hz in the example vendor
    source = read_source(source_episode, config_for("vla").contract, config_for("vla").truth)
    with open(path, "rb") as fh:
        reader = make_reader(fh)
        summary = reader.get_summary()
        assert summary is not None
        by_topic: dict[str, list] = {}
        for _, channel, message in reader.iter_messages():
            by_topic.setdefault(channel.topic, []).append((channel, message))
    for topic in ("/robot/joint_states/resampled", "/robot/action/resampled"):
        stamps = np.array([m.log_time for _, m in by_topic[topic]])
        payload_stamps = [json.loads(m.data)["stamp_ns"] for _, m in by_topic[topic]]
        assert list(stamps) == payload_stamps
        assert (stamps % period_ns == 0).all() and (np.diff(stamps) == period_ns).all()
        channel = by_topic[topic][0][0]
        methods = json.loads(channel.metadata["sluice.interpolation"])
        assert methods["gripper"] == "previous"
        assert methods["position" if "joint_states" in topic else "joint_targets"] == "linear"
        assert channel.metadata["sluice.resample_rate_hz"] == "50.0"
    assert len(by_topic["/robot/joint_states/resampled"]) == len(by_topic["/robot/action/resampled"])
    for series in (*source.state, *source.actions):
        assert len(by_topic[series.topic]) == len(series.stamps_ns)  # native stream kept whole


def test_topic_groups_never_share_a_chunk_and_camera_chunks_start_at_gops(
    source_episode: Path, tmp_path: Path
) -> None:
    # Small targets so that every group is cut into several chunks.
    config = config_for("vla", chunk_target_bytes={"cameras": 8 * 1024, "proprio": 4 * 1024})
    path = transcode_episode(source_episode, tmp_path / "episode.mcap", config, PROVENANCE).path
    with open(path, "rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None
    groups_seen: dict[str, int] = {}
    tables = frame_table(path)
    for chunk in summary.chunk_indexes:
        groups = {summary.channels[c].metadata[GROUP_KEY] for c in chunk.message_index_offsets}
        assert len(groups) == 1, groups
        group = groups.pop()
        groups_seen[group] = groups_seen.get(group, 0) + 1
    assert all(groups_seen.get(g, 0) >= 2 for g in (GROUP_CAMERAS, GROUP_PROPRIO, GROUP_NATIVE)), groups_seen
    # Every camera chunk opens each camera's part of it with a keyframe: chunks are cut at GOP boundaries.
    with open(path, "rb") as fh:
        index = build_index(fh, str(path))
    for camera in index.cameras.values():
        first_in_chunk: dict[int, int] = {}
        for position, location in enumerate(camera.locations):
            first_in_chunk.setdefault(location.chunk, position)
        assert len(first_in_chunk) >= 2
        assert {camera.letters[p] for p in first_in_chunk.values()} == {"I"}, camera.name
    assert tables["front"]["types"].startswith("IPPPPPPPPPI")


@pytest.mark.parametrize(
    ("profile", "gop"),
    [
        ("vla", "I" + "P" * 9),
        ("world_model", "I" + "P" * 44),
        # shared intra anchors (an open GOP: the second is a non-IDR I-frame), 16 B-frames between them
        ("random_access", "I" + "b" * 16 + "i" + "b" * 16 + "i"),
    ],
)
def test_each_profile_writes_its_gop_structure(
    profile: str, gop: str, transcoded: Callable[[str], TranscodeResult]
) -> None:
    path = transcoded(profile).path
    for camera, table in frame_table(path).items():
        display = "".join(
            table["types"][i] for i in sorted(range(len(table["pts_ns"])), key=lambda i: table["pts_ns"][i])
        )
        assert display.startswith(gop), (camera, display)
        letters = [frame_letter(access_unit_info(m.data)) for m in camera_messages(path, table["topic"])]
        assert "".join(letters) == table["types"]


def test_metadata_records_provenance(transcoded: Callable[[str], TranscodeResult]) -> None:
    with open(transcoded("vla").path, "rb") as fh:
        meta = {m.name: dict(m.metadata) for m in make_reader(fh).iter_metadata()}
    record = meta["sluice.transcode"]
    assert record["source_sha256"] == PROVENANCE.source_sha256
    assert record["config_hash"] == PROVENANCE.config_hash
    assert record["code_version"] == "test" and record["calibration_id"] == "cal-1"
    assert record["profile"] == "vla" and "keyint=10" in record["x264_params"]
    assert meta["episode"]["episode_id"] == "rb01-s000-e000"  # the source's own record is kept


def test_same_input_and_config_give_the_same_bytes_in_process_or_in_encoder_processes(
    source_episode: Path, transcoded: Callable[[str], TranscodeResult], tmp_path: Path
) -> None:
    reference = transcoded("random_access")
    again = transcode_episode(
        source_episode, tmp_path / "a" / "episode.mcap", config_for("random_access"), PROVENANCE
    )
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        # three cameras dealt over two processes, two of them encoded at once in threads
        pooled = transcode_episode(
            source_episode,
            tmp_path / "b" / "episode.mcap",
            config_for("random_access"),
            PROVENANCE,
            executor=pool,
            executor_workers=2,
        )
        per_camera = transcode_episode(
            source_episode,
            tmp_path / "c" / "episode.mcap",
            config_for("random_access"),
            PROVENANCE,
            executor=pool,
        )
    assert again.sha256 == pooled.sha256 == per_camera.sha256 == reference.sha256
    assert again.path.read_bytes() == reference.path.read_bytes()


@pytest.mark.parametrize("encoders", [0, 2], ids=["in-process", "worker-pool"])
def test_a_transcode_runs_no_collection_of_the_cyclic_gc(
    source_episode: Path, tmp_path: Path, encoders: int
) -> None:
    """Its objects are freed by reference counting: thresholds that would collect every few allocations
    collect nothing while it runs (pipeline.gcpause), in this process or with the step's encoder pool,
    and the collector is back on after it."""
    config = config_for("vla")
    transcode_code = inspect.unwrap(transcode_episode).__code__
    inside: list[int] = []
    outside: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase != "start":
            return
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not transcode_code:
            frame = frame.f_back
        (outside if frame is None else inside).append(info["generation"])

    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(WorkerPool(encoders, name="transcode encoder")) if encoders else None
        thresholds = gc.get_threshold()
        gc.set_threshold(10, 1, 1)
        gc.callbacks.append(count)
        try:
            transcode_episode(
                source_episode,
                tmp_path / "episode.mcap",
                config,
                PROVENANCE,
                executor=pool,
                executor_workers=encoders or None,
            )
            gc.collect(0)  # the counter sees collections outside
        finally:
            gc.callbacks.remove(count)
            gc.set_threshold(*thresholds)
    assert inside == []
    assert outside
    assert gc.isenabled()
