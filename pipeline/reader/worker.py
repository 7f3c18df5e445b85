"""What runs in a sample loader's worker process (``SampleLoader(processes=True)``): its readers, its
tasks, and the frames it hands back through shared memory (:mod:`pipeline.reader.shared`).

A task is a consecutive part of one batch (the loader cuts each batch into one part per worker): its
samples are read in order, and the first that fails raises its :class:`SampleReadError`, as it would have
in the training process. Each process keeps its own readers, the ``max_open_readers`` most recently used.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.reader import shared
from pipeline.reader.loader import EpisodeRow, sample_row
from pipeline.reader.sample import EpisodeReader, Sample

#: This process's readers (uri -> reader, least recently used first) and options.
_READERS: OrderedDict[str, EpisodeReader] = OrderedDict()
_STATE: dict[str, Any] = {}


@dataclass
class PartResult:
    """What a task sends back: its samples (images None when they are in ``frames``), the segment holding
    the frames, and how many readers this process closed on eviction since its previous task."""

    samples: list[Sample]
    frames: shared.SharedFrames | None
    readers_closed: int


def init(
    storage_options: dict[str, Any],
    max_open_readers: int,
    warm_uris: list[str],
    expected_sha256: Mapping[str, str],
    verify: bool,
    segment_prefix: str,
) -> None:
    """A worker's initializer: remember the options and open the first files (a file that cannot be
    opened is remembered for :func:`warm` to report, and raised again by the sample that needs it)."""
    _STATE.update(
        storage_options=storage_options,
        max_open_readers=max_open_readers,
        expected_sha256=expected_sha256,
        verify=verify,
        segment_prefix=segment_prefix,
        failed=None,
        readers_closed=0,
    )
    for uri in warm_uris:
        try:
            reader(uri)
        except Exception as exc:
            _STATE["failed"] = (uri, repr(exc))
            break


def reader(uri: str) -> EpisodeReader:
    """This process's reader of ``uri``, opened if needed (the least recently used one closed first when
    ``max_open_readers`` are open)."""
    found = _READERS.get(uri)
    if found is not None:
        _READERS.move_to_end(uri)
        return found
    while len(_READERS) >= _STATE["max_open_readers"]:
        _READERS.popitem(last=False)[1].close()
        _STATE["readers_closed"] += 1
    opened = _READERS[uri] = EpisodeReader(
        uri,
        storage_options=_STATE["storage_options"],
        expected_sha256=_STATE["expected_sha256"].get(uri),
        verify=_STATE["verify"],
    )
    return opened


def warm(delay_s: float) -> tuple[int, tuple[str, str] | None]:
    """This process's id and the first file its initializer could not open, after holding the process
    ``delay_s`` (so that the next warm-up task reaches another one)."""
    time.sleep(delay_s)
    return os.getpid(), _STATE.get("failed")


def read_part(
    picks: Sequence[tuple[int, EpisodeRow, float]],
    room_ns: int,
    options: Mapping[str, Any],
    rows: str = "row",
) -> PartResult:
    """The samples of ``picks`` ((the source's row number, row, position along its window)), their frames
    moved into one shared-memory segment; ``rows`` is what an error calls the number."""
    samples = [sample_row(reader, number, row, where, room_ns, options, rows) for number, row, where in picks]
    frames = shared.export_frames(samples, _STATE["segment_prefix"])
    closed, _STATE["readers_closed"] = _STATE["readers_closed"], 0
    return PartResult(samples, frames, closed)
