"""The sandbox: what is refused before any parser runs, and how the worker is bounded and recovers."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.enums import ReasonCode
from pipeline.videoprobe import (
    ProbeTargetUnreadableError,
    ProbeWorkerError,
    VideoProbe,
    VideoProbeLimits,
    VideoProber,
    _measure,
    probe_video,
)

R = ReasonCode
MakeVideo = Callable[..., Path]
HEVC_1080P = "sample_edit_list_no_sync_frame_before_edit.mp4"  # the corpus's heaviest decode (~1 s)


def test_zero_byte_file_is_refused_without_a_worker(tmp_path: Path) -> None:
    empty = tmp_path / "empty.mp4"
    empty.touch()
    probe = probe_video(empty)
    assert probe.codes == [R.ZERO_BYTES]
    assert probe.size_bytes == 0
    assert probe.probe_timing is not None and probe.probe_timing.worker_start_s is None


@pytest.fixture
def drop_with_playlists(tmp_path: Path, make_video: MakeVideo) -> Path:
    """A vendor folder whose playlists point at a real video outside it."""
    (tmp_path / "outside").mkdir()
    make_video(tmp_path / "outside" / "secret.mp4")
    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / "evil.m3u8").write_text(
        "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n../outside/secret.mp4\n#EXT-X-ENDLIST\n"
    )
    (drop / "evil.ffconcat").write_text("ffconcat version 1.0\nfile '../outside/secret.mp4'\n")
    # The same playlist under a video name: judged by its bytes, not its extension.
    shutil.copy(drop / "evil.m3u8", drop / "innocent.mp4")
    return drop


@pytest.mark.parametrize("name", ["evil.m3u8", "evil.ffconcat", "innocent.mp4"])
def test_playlists_are_never_followed(prober: VideoProber, drop_with_playlists: Path, name: str) -> None:
    probe = prober.probe(drop_with_playlists / name, root=drop_with_playlists)
    assert probe.codes == [R.DISALLOWED_CONTAINER]
    assert probe.decoded_frames == 0 and probe.container_format is None


def test_the_worker_refuses_a_forced_playlist_demuxer(drop_with_playlists: Path) -> None:
    """Defence in depth: even if the sniffing were bypassed, FFmpeg's format whitelist refuses HLS."""
    limits = VideoProbeLimits().model_dump(mode="json")
    result = _measure.measure(os.fsencode(drop_with_playlists / "evil.m3u8"), "hls", limits)
    assert "open_error" in result
    assert "decoded_frames" not in result


def test_symlink_out_of_the_vendor_root_is_refused(
    prober: VideoProber, tmp_path: Path, make_video: MakeVideo
) -> None:
    outside = make_video(tmp_path / "outside.mp4")
    root = tmp_path / "vendor"
    root.mkdir()
    (root / "link.mp4").symlink_to(outside)
    probe = prober.probe(root / "link.mp4", root=root)
    assert probe.codes == [R.OUTSIDE_VENDOR_ROOT]
    assert prober.probe(outside, root=tmp_path).findings == []


def test_a_fifo_is_refused_instead_of_hanging(prober: VideoProber, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)
    probe = prober.probe(fifo)
    assert probe.codes == [R.DISALLOWED_CONTAINER]
    assert "FIFO" in probe.findings[0].detail


def test_symlink_loop_is_refused_under_a_root(prober: VideoProber, tmp_path: Path) -> None:
    (tmp_path / "a.mp4").symlink_to(tmp_path / "b.mp4")
    (tmp_path / "b.mp4").symlink_to(tmp_path / "a.mp4")
    assert prober.probe(tmp_path / "a.mp4", root=tmp_path).codes == [R.OUTSIDE_VENDOR_ROOT]


def test_a_missing_file_is_an_infrastructure_error(prober: VideoProber, tmp_path: Path) -> None:
    with pytest.raises(ProbeTargetUnreadableError, match=r"gone\.mp4.*No such file"):
        prober.probe(tmp_path / "gone.mp4")


@pytest.mark.parametrize(
    "name",
    [
        "vidéo 日本語 🎥.mp4",
        "new\nline.mp4",
        "-rf --leading-dash.mp4",
        "file:colon?.mp4",
        b"latin1-\xe9\xff.mp4",
    ],
    ids=["unicode", "newline", "leading-dash", "protocol-lookalike", "not-utf8"],
)
def test_odd_file_names_probe_like_any_other(
    prober: VideoProber, tmp_path: Path, clip: Path, name: str | bytes
) -> None:
    target = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), os.fsencode(name))))
    shutil.copy(clip, target)
    before = target.read_bytes()
    probe = prober.probe(target, root=tmp_path)
    assert probe.findings == [] and probe.decoded_frames == 12
    assert VideoProbe.model_validate_json(probe.model_dump_json()) == probe
    assert target.read_bytes() == before


def test_timeout_kills_the_worker_and_the_next_file_still_probes(corpus_dir: Path, clip: Path) -> None:
    # 0.3 s: the HEVC file needs over a second of decoding; the 12-frame clip about 0.02 s.
    with VideoProber(VideoProbeLimits(timeout_s=0.3)) as hasty:
        probe = hasty.probe(corpus_dir / "video" / HEVC_1080P)
        assert probe.codes == [R.PROBE_TIMEOUT]
        assert probe.quarantined
        after = hasty.probe(clip)
    assert after.findings == [] and after.probe_timing is not None
    assert after.probe_timing.worker_start_s is not None  # a fresh worker replaced the killed one


def test_memory_limit_stops_a_large_decode(corpus_dir: Path, clip: Path) -> None:
    # 32 MiB of headroom: plenty for a 128x96 clip (24 MiB suffice), far from what a 1080p 10-bit HEVC
    # decoder needs for its reference pictures (it still fails at 64 MiB and passes at 80 here).
    with VideoProber(VideoProbeLimits(memory_limit_bytes=32 * 2**20)) as tight:
        probe = tight.probe(corpus_dir / "video" / HEVC_1080P)
        assert probe.codes == [R.PROBE_RESOURCE_LIMIT]
        assert probe.quarantined
        assert tight.probe(clip).findings == []


def test_worker_runs_with_limits_and_a_minimal_environment(prober: VideoProber, clip: Path) -> None:
    prober.probe(clip)
    worker = prober._worker
    assert worker is not None
    limits = {
        line[:26].strip(): line[26:].split()[0]
        for line in Path(f"/proc/{worker.proc.pid}/limits").read_text().splitlines()[1:]
    }
    assert limits["Max file size"] == "0"
    assert limits["Max core file size"] == "0"
    assert limits["Max address space"] != "unlimited"
    environ = Path(f"/proc/{worker.proc.pid}/environ").read_bytes().split(b"\0")
    names = {entry.split(b"=", 1)[0] for entry in environ if entry}
    assert names <= {b"PYTHONPATH", b"OPENBLAS_NUM_THREADS", b"OMP_NUM_THREADS", b"LC_ALL"}


def test_limits_name_what_is_allowed() -> None:
    with pytest.raises(ValidationError, match="'mov' or 'matroska'"):
        VideoProbeLimits(allowed_containers=("hls",))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="extra"):
        VideoProbeLimits(max_pixel=10)  # type: ignore[call-arg]


def test_a_crashing_decoder_becomes_a_finding_and_the_worker_is_replaced(
    prober: VideoProber, corpus_dir: Path, clip: Path
) -> None:
    prober.probe(clip)  # a warm worker
    worker = prober._worker
    assert worker is not None
    # What a decoder bug does to the process, delivered mid-decode of a file that takes over a second.
    timer = threading.Timer(0.2, os.kill, (worker.proc.pid, signal.SIGSEGV))
    timer.start()
    try:
        probe = prober.probe(corpus_dir / "video" / HEVC_1080P)
    finally:
        timer.cancel()
    assert probe.codes == [R.DECODE_ERROR]
    assert "SIGSEGV" in probe.findings[0].detail
    assert prober.probe(clip).findings == []


def test_a_worker_that_cannot_start_is_an_infrastructure_error(clip: Path, tmp_path: Path) -> None:
    with (
        VideoProber(python=str(tmp_path / "no-such-python")) as broken,
        pytest.raises(ProbeWorkerError, match="could not start"),
    ):
        broken.probe(clip)
