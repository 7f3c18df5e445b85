"""The byte-level mutators other tests reuse: record scanning, cuts, CRC flips, damaged H.264 samples."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest
from mcap.opcode import Opcode
from mcap.stream_reader import CRCValidationError
from synth_helpers import READ_ERRORS, decode_clip, only, read_indexed, read_linear

from pipeline.synth.mutate import (
    MutationError,
    chunk_spans,
    cut_points,
    damage_h264_samples,
    flip_bits,
    flip_chunk_crc,
    scan_records,
    truncate,
)


@pytest.fixture
def clean_episode(robot_drop, tmp_path: Path) -> Path:
    root, manifest = robot_drop
    copy = tmp_path / "episode.mcap"
    shutil.copyfile(root / only(manifest, None).path, copy)
    return copy


def test_scan_covers_the_file_record_by_record(clean_episode: Path) -> None:
    spans = scan_records(clean_episode)
    assert spans[0].opcode == Opcode.HEADER and spans[0].offset == 8
    assert spans[-1].opcode == Opcode.FOOTER and spans[-1].end + 8 == clean_episode.stat().st_size
    assert all(a.end == b.offset for a, b in itertools.pairwise(spans))
    assert len(chunk_spans(clean_episode)) >= 3
    assert Opcode.DATA_END in {s.opcode for s in spans}


@pytest.mark.parametrize(
    "point",
    ["after_magic", "after_header", "mid_chunk", "record_boundary", "before_footer", "before_trailing_magic"],
)
def test_every_cut_point_fails_a_validated_read(clean_episode: Path, point: str) -> None:
    points = cut_points(clean_episode)
    assert sorted(points.values()) == list(points.values())  # named in file order
    truncate(clean_episode, points[point])
    assert clean_episode.stat().st_size == points[point]
    with pytest.raises(READ_ERRORS):
        read_linear(clean_episode)
    with pytest.raises(READ_ERRORS):
        read_indexed(clean_episode)


def test_flip_each_chunk_crc(clean_episode: Path) -> None:
    for which in range(len(chunk_spans(clean_episode))):
        copy = clean_episode.with_name(f"flip{which}.mcap")
        shutil.copyfile(clean_episode, copy)
        flip_chunk_crc(copy, which)
        with pytest.raises(CRCValidationError):
            read_linear(copy)


def test_flipped_payload_bit_is_caught(clean_episode: Path) -> None:
    chunk = chunk_spans(clean_episode)[1]
    flip_bits(clean_episode, chunk.offset + chunk.length - 100)
    with pytest.raises(READ_ERRORS):
        read_linear(clean_episode)


def test_mutations_refuse_what_they_cannot_do(clean_episode: Path, tmp_path: Path) -> None:
    with pytest.raises(MutationError, match="out of range"):
        flip_chunk_crc(clean_episode, 999)
    with pytest.raises(MutationError, match="out of range"):
        truncate(clean_episode, clean_episode.stat().st_size + 1)
    not_mcap = tmp_path / "x.mcap"
    not_mcap.write_bytes(b"PK\x03\x04 not an mcap")
    with pytest.raises(MutationError, match="MCAP magic"):
        scan_records(not_mcap)


def test_damage_h264_samples(video_drop, tmp_path: Path) -> None:
    root, manifest = video_drop
    copy = tmp_path / "clip.mp4"
    shutil.copyfile(root / only(manifest, None).path, copy)
    damaged = damage_h264_samples(copy, count=2, seed=1)
    assert len(damaged) == 2
    assert copy.stat().st_size == (root / only(manifest, None).path).stat().st_size  # in place, same size
    _, errors = decode_clip(copy)
    assert errors >= 1
