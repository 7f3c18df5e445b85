"""Decoding in a thread ahead of the encoder keeps frames in order and errors where they occurred."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from transcode_helpers import config_for

from pipeline.config import TrainingProfile
from pipeline.transcode.cameras import decode_units, prefetched
from pipeline.transcode.errors import TranscodeInputError
from pipeline.transcode.source import read_source


def _units(source: Path) -> list[bytes]:
    config = config_for(TrainingProfile.VLA)
    return [p.data for p in read_source(source, config.contract, config.truth).cameras[0].frames]


def test_prefetched_decode_yields_the_same_frames_in_order(source_episode: Path) -> None:
    units = _units(source_episode)
    direct = [(f.pts, f.to_ndarray().tobytes()) for f in decode_units(units, what="direct")]
    ahead = [
        (f.pts, f.to_ndarray().tobytes()) for f in prefetched(decode_units(units, what="ahead"), depth=2)
    ]
    assert len(direct) == len(units) and ahead == direct


def test_prefetched_raises_the_decode_error_in_the_consumer(source_episode: Path) -> None:
    units = _units(source_episode)
    garbage = b"\x00\x00\x00\x01\x65" + b"\xff" * 256  # an IDR slice header with nothing valid after it
    broken = [*units[:3], garbage, garbage]
    seen: list[int] = []
    with pytest.raises(TranscodeInputError, match="broken"):
        for frame in prefetched(decode_units(broken, what="broken"), depth=1):
            seen.append(int(frame.pts))
    assert seen == sorted(seen)


def test_prefetched_stops_its_thread_when_the_consumer_leaves_early() -> None:
    def endless() -> Iterator[int]:
        k = 0
        while True:
            yield k
            k += 1

    before = threading.active_count()
    stream = prefetched(endless(), depth=2)  # type: ignore[arg-type]
    assert [next(stream) for _ in range(5)] == [0, 1, 2, 3, 4]
    stream.close()  # runs the generator's finally: the producer must give up and be joined
    assert threading.active_count() == before
