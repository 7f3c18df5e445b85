"""Picture spools: an encoder reads a camera's pictures while the source is still being read, and stops
when the spool is withdrawn or its writer dies."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from pipeline.families import CameraFrames, FrameKind, FramePayload
from pipeline.families.spool import SpoolWithdrawnError, SpoolWriter, read_spool


def _payloads(n: int) -> list[FramePayload]:
    return [FramePayload("jpeg", bytes([k % 256]) * (1000 * k + 1), f"jpeg frame {k}") for k in range(n)]


def test_a_spool_is_read_while_it_is_written(tmp_path: Path) -> None:
    path = tmp_path / "a.spool"
    sent = _payloads(40)
    writer = SpoolWriter(path)

    def write_slowly() -> None:
        with writer:
            for payload in sent:
                writer.add(payload)
                time.sleep(0.002)
            writer.end()

    thread = threading.Thread(target=write_slowly)
    thread.start()
    got = list(read_spool(path, writer_pid=os.getpid()))  # starts before most of it is written
    thread.join()
    assert got == sent
    assert writer.count == len(sent)
    assert list(CameraFrames(FrameKind.IMAGE, "jpeg", len(sent), spool=str(path))) == sent


def test_a_withdrawn_spool_stops_its_reader(tmp_path: Path) -> None:
    path = tmp_path / "a.spool"
    with SpoolWriter(path) as writer:
        for payload in _payloads(3):
            writer.add(payload)
        pictures = read_spool(path, writer_pid=os.getpid())
        assert next(pictures).declared == "jpeg frame 0"
        path.unlink()  # what the transcode does when the source turns out bad
        with pytest.raises(SpoolWithdrawnError, match="removed before its end"):
            next(pictures)
    with pytest.raises(SpoolWithdrawnError, match="removed before it was opened"):
        next(read_spool(path, writer_pid=os.getpid()))


def test_a_reader_waiting_on_a_dead_writer_gives_up(tmp_path: Path) -> None:
    path = tmp_path / "a.spool"
    child = subprocess.Popen(["true"])  # a writer that has ended
    child.wait()
    with SpoolWriter(path) as writer:
        writer.add(_payloads(1)[0])  # never ended
        pictures = read_spool(path, writer_pid=child.pid)
        assert next(pictures).format == "jpeg"
        with pytest.raises(SpoolWithdrawnError, match=f"pid {child.pid}"):
            next(pictures)


def test_a_finished_spool_cut_short_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "a.spool"
    with SpoolWriter(path) as writer:
        for payload in _payloads(2):
            writer.add(payload)
        writer.end()
    whole = path.read_bytes()
    path.write_bytes(whole[:-100])
    with pytest.raises(SpoolWithdrawnError, match="ends inside a record"):
        list(CameraFrames(FrameKind.IMAGE, "jpeg", 2, spool=str(path)))
