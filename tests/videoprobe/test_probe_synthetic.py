"""Synthetic bad inputs generated with PyAV: each measured right and coded with the right finding."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline.enums import ReasonCode
from pipeline.videoprobe import VideoProbeLimits, VideoProber, derive_findings

R = ReasonCode
MakeVideo = Callable[..., Path]


def test_clean_clip_is_measured_and_has_no_findings(prober: VideoProber, clip: Path) -> None:
    probe = prober.probe(clip)
    assert probe.findings == []
    assert (probe.sniffed_container, probe.codec, probe.pixel_format) == ("mov", "h264", "yuv420p")
    assert (probe.width, probe.height, probe.decoded_frames, probe.header_frames) == (128, 96, 12, 12)
    assert probe.fps_avg == pytest.approx(30) and probe.fps_measured == pytest.approx(30)
    assert probe.duration_s == pytest.approx(12 / 30)
    assert probe.leading_keyframe is True and probe.rotation_deg == 0 and probe.reflected is False
    assert probe.keyframes is not None and probe.keyframes.count >= 1
    assert probe.sampled_frames == 12 and probe.blank_frames == 0
    assert probe.letterbox is not None and probe.letterbox.vertical == probe.letterbox.horizontal == 0
    assert probe.probe_timing is not None and probe.probe_timing.per_frame_ms is not None


def test_irregular_timestamps_are_variable_frame_rate(
    prober: VideoProber, tmp_path: Path, make_video: MakeVideo
) -> None:
    steps = [33, 50, 21, 40, 33, 60, 25]
    pts = [sum(steps[j % len(steps)] for j in range(i)) for i in range(20)]
    probe = prober.probe(make_video(tmp_path / "vfr.mp4", frames=20, pts_ms=pts))
    assert probe.variable_frame_rate is True
    assert probe.codes == [R.VARIABLE_FRAME_RATE]
    assert probe.timing is not None and probe.timing.interval_max_s == pytest.approx(0.060, abs=0.002)


def test_a_dropped_frame_in_a_constant_rate_clip_is_not_vfr(
    prober: VideoProber, tmp_path: Path, make_video: MakeVideo
) -> None:
    pts = [round(i * 1000 / 30) for i in range(21) if i != 10]
    probe = prober.probe(make_video(tmp_path / "dropped.mp4", frames=20, pts_ms=pts))
    assert probe.variable_frame_rate is False
    assert probe.timing is not None and probe.timing.dropped_frame_gaps == 1
    assert probe.findings == []


def test_black_bars_are_letterboxing(prober: VideoProber, tmp_path: Path, make_video: MakeVideo) -> None:
    bar = 16  # rows of black at the top and at the bottom of 96

    def letterboxed(index: int, rng: np.random.Generator) -> np.ndarray:
        image = rng.integers(40, 255, (96, 128, 3), dtype=np.uint8)
        image[:bar] = image[-bar:] = 0
        return image

    probe = prober.probe(make_video(tmp_path / "letterbox.mp4", paint=letterboxed))
    assert probe.codes == [R.LETTERBOXED]
    assert probe.letterbox is not None
    assert probe.letterbox.top == pytest.approx(bar / 96, abs=0.03)
    assert probe.letterbox.bottom == pytest.approx(bar / 96, abs=0.03)
    assert probe.letterbox.horizontal == 0
    # The gate's threshold decides: the same measurement under a looser trigger is no finding.
    looser = VideoProbeLimits(letterbox_min_fraction=0.5)
    assert derive_findings(probe, looser) == []


def test_constant_grey_is_blank_too(prober: VideoProber, tmp_path: Path, make_video: MakeVideo) -> None:
    grey = make_video(tmp_path / "grey.mp4", paint=lambda i, rng: np.full((96, 128, 3), 128, np.uint8))
    probe = prober.probe(grey)
    assert probe.codes == [R.BLANK_VIDEO]
    assert probe.mean_luma == pytest.approx(128, abs=4)


def test_interlaced_h264_is_flagged(prober: VideoProber, tmp_path: Path, make_video: MakeVideo) -> None:
    path = make_video(tmp_path / "interlaced.mp4", encoder_options={"x264-params": "interlaced=1:tff=1"})
    probe = prober.probe(path)
    assert probe.codes == [R.INTERLACED]
    assert probe.interlaced_frames == probe.decoded_frames == 12
    assert probe.field_order == "tt"


def test_resolution_over_max_pixels_is_refused_before_decoding(clip: Path) -> None:
    with VideoProber(VideoProbeLimits(max_pixels=128 * 96 - 1)) as strict:
        probe = strict.probe(clip)
    assert probe.codes == [R.RESOLUTION_OUT_OF_BOUNDS]
    assert probe.resolution_refused and probe.decoded_frames == 0 and probe.packets == 0
    assert "128x96" in probe.finding(R.RESOLUTION_OUT_OF_BOUNDS).detail  # type: ignore[union-attr]
    with VideoProber(VideoProbeLimits(max_pixels=128 * 96)) as exact:
        assert exact.probe(clip).findings == []


def test_a_single_frame_is_too_few(prober: VideoProber, tmp_path: Path, make_video: MakeVideo) -> None:
    probe = prober.probe(make_video(tmp_path / "one.mp4", frames=1))
    assert probe.codes == [R.TOO_FEW_FRAMES]
    assert probe.decoded_frames == 1


def test_truncated_mp4_is_quarantined(prober: VideoProber, tmp_path: Path, make_video: MakeVideo) -> None:
    moov_first = tmp_path / "faststart.mp4"
    moov_last = tmp_path / "plain.mp4"
    make_video(moov_first, frames=30)
    make_video(moov_last, frames=30)
    # Re-mux with the index in front (the common streaming layout), then cut both files at 60%.
    with (
        av.open(str(moov_last)) as src,
        av.open(str(moov_first), "w", options={"movflags": "+faststart"}) as dst,
    ):
        stream = dst.add_stream_from_template(src.streams.video[0])
        for packet in src.demux(src.streams.video[0]):
            if packet.dts is not None:
                packet.stream = stream
                dst.mux(packet)
    for path in (moov_first, moov_last):
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * 0.6)])
    front = prober.probe(moov_first)
    assert R.TRUNCATED in front.codes and front.quarantined
    assert front.packets < front.header_frames  # type: ignore[operator]
    back = prober.probe(moov_last)
    assert back.codes == [R.CONTAINER_ERROR]


def test_matroska_is_sniffed_by_content_not_by_name(
    prober: VideoProber, tmp_path: Path, make_video: MakeVideo
) -> None:
    path = make_video(tmp_path / "really-matroska.mp4", container="matroska")
    probe = prober.probe(path)
    assert (probe.sniffed_container, probe.findings) == ("matroska", [])
    with VideoProber(VideoProbeLimits(allowed_containers=("mov",))) as mov_only:
        refused = mov_only.probe(path)
    assert refused.codes == [R.DISALLOWED_CONTAINER]
    assert refused.probe_timing is not None and refused.probe_timing.worker_start_s is None
