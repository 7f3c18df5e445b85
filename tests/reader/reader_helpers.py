"""A tiny synthetic robot episode transcoded per profile, for the sample reader's tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pipeline.config import TrainingProfile
from pipeline.reader import EpisodeRow, SampleBatch
from pipeline.synth.calibration import make_calibration
from pipeline.synth.robot import EpisodeMedia, EpisodeSpec, write_episode
from pipeline.transcode import Provenance, RobotTranscodeConfig, transcode_episode
from pipeline.transcode.source import read_source

# The same contract and profile defaults as the acme_robotics example vendor.
WIDTH, HEIGHT, SECONDS = 128, 96, 3.0
START_NS = 1_748_851_200_000_000_000
PROVENANCE = Provenance(source_sha256="ab" * 32, config_hash="cd" * 32, code_version="test")


def robot_config(profile: str) -> RobotTranscodeConfig:
    from pipeline.bench.read import robot_config as bench_config

    return bench_config(TrainingProfile(profile))


def make_episode(folder: Path, profile: str) -> tuple[Path, Path]:
    """(source, transcoded) paths of a 3 s, 128x96 episode under ``profile``."""
    source = folder / "source.mcap"
    if not source.exists():
        calibration = make_calibration(0, 0, "rb01", 0, WIDTH, HEIGHT)
        spec = EpisodeSpec("rb01", "s", "e", "task", "op", START_NS, SECONDS, 11, calibration)
        write_episode(source, spec, EpisodeMedia(width=WIDTH, height=HEIGHT))
    out = folder / profile / "episode.mcap"
    transcode_episode(source, out, robot_config(profile), PROVENANCE)
    return source, out


def source_stamps(source: Path, profile: str) -> dict[str, list[int]]:
    config = robot_config(profile)
    return {c.name: list(c.stamps_ns) for c in read_source(source, config.contract, config.truth).cameras}


# -- loader rows and what the loader yields --------------------------------------------------------------

NS = 1_000_000_000


def loader_rows(path: Path, span: tuple[int, int]) -> list[EpisodeRow]:
    """The whole episode, and a 1.5 s window in its middle, as two rows of the same file."""
    start = span[0]
    return [
        EpisodeRow(str(path), "whole"),
        EpisodeRow(str(path), "middle", start + NS, start + 2 * NS + NS // 2),
    ]


def batch_key(batch: SampleBatch) -> list[tuple[int, int]]:
    """(row, sample time) of each sample of a batch."""
    return [(row, sample.t_ns) for row, sample in zip(batch.rows, batch, strict=True)]


def assert_same_samples(left_batches: list[SampleBatch], right_batches: list[SampleBatch]) -> None:
    """The same samples: times, state/action messages, frame stamps and pixels."""
    for left, right in zip(left_batches, right_batches, strict=True):
        assert batch_key(left) == batch_key(right)
        for a, b in zip(left, right, strict=True):
            assert a.proprio == b.proprio
            assert list(a.frames) == list(b.frames)
            for camera in a.frames:
                for fa, fb in zip(a.frames[camera], b.frames[camera], strict=True):
                    assert fa.stamp_ns == fb.stamp_ns and np.array_equal(fa.image, fb.image)


# -- damaged and reduced copies of a transcoded episode -------------------------------------------------

_MESSAGE_HEAD_BYTES = 31  # opcode, record length, channel id, sequence, log time, publish time


def damage_state_chunk(path: Path, dst: Path) -> Path:
    """A copy of ``path`` whose compressed chunk holding the state/action messages has 64 bytes zeroed in
    the middle of its data: the index still reads, the chunk no longer decompresses."""
    from pipeline.reader import open_episode

    with open_episode(path) as reader:
        chunk = reader.index.chunks[reader.index.by_topic[reader.proprio_topics[0]][0].chunk]
    assert chunk.compression, "the state/action chunk of a transcoded episode is compressed"
    data = bytearray(path.read_bytes())
    middle = chunk.records_offset + chunk.compressed_size // 2
    data[middle : middle + 64] = bytes(64)
    dst.write_bytes(bytes(data))
    return dst


def damage_frames(path: Path, dst: Path, camera: str, t_ns: int) -> Path:
    """A copy of ``path`` whose H.264 access units needed for ``camera``'s frame on screen at ``t_ns`` are
    zeroed (same lengths: the messages and the index stay valid, the pictures do not decode)."""
    from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo

    from pipeline.reader import open_episode

    data = bytearray(path.read_bytes())
    with open_episode(path) as reader:
        table = reader.index.cameras[camera]
        for position in table.dependencies(table.frame_at(t_ns)):
            loc = table.locations[position]
            chunk = reader.index.chunks[loc.chunk]
            assert not chunk.compression, "transcoded video chunks are stored uncompressed"
            record = chunk.records_offset + loc.offset
            payload = bytes(data[record + _MESSAGE_HEAD_BYTES : record + loc.length])
            units = CompressedVideo.FromString(payload).data
            at = record + _MESSAGE_HEAD_BYTES + payload.index(units)
            data[at : at + len(units)] = bytes(len(units))
    dst.write_bytes(bytes(data))
    return dst


def without_cameras(path: Path, dst: Path) -> Path:
    """A copy of ``path`` with every camera's messages left out and an empty frame table: an episode of
    state and actions only."""
    from mcap.reader import make_reader
    from mcap.writer import Writer

    from pipeline.transcode import layout

    with open(path, "rb") as fin, open(dst, "wb") as fout:
        reader = make_reader(fin)
        summary = reader.get_summary()
        assert summary is not None
        frames = {m.name: dict(m.metadata) for m in reader.iter_metadata()}[layout.FRAMES_METADATA]
        video_topics = {json.loads(text)["topic"] for text in frames.values()}
        writer = Writer(fout)
        writer.start(profile="", library="sluice test: cameras left out")
        schemas = {
            sid: writer.register_schema(s.name, s.encoding, s.data) for sid, s in summary.schemas.items()
        }
        channels = {
            cid: writer.register_channel(
                c.topic, c.message_encoding, schemas.get(c.schema_id, 0), dict(c.metadata)
            )
            for cid, c in summary.channels.items()
        }
        for record in reader.iter_metadata():
            empty = record.name == layout.FRAMES_METADATA
            writer.add_metadata(record.name, {} if empty else dict(record.metadata))
        for _, channel, message in reader.iter_messages(log_time_order=False):
            if channel.topic not in video_topics:
                writer.add_message(
                    channels[channel.id],
                    message.log_time,
                    message.data,
                    message.publish_time,
                    message.sequence,
                )
        writer.finish()
    return dst
