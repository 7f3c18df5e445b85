"""Video-vendor transform: clips cut at scene changes, upright, cropped, constant rate, checked."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from transcode_helpers import NORTHWIND, vendor_with

from pipeline.config import QualityPost, TranscodeOptions
from pipeline.enums import ReasonCode
from pipeline.media.framecode import FrameCode, read_frame_index
from pipeline.synth.scene import SceneGenerator, yuv420p_buffer
from pipeline.synth.video import ClipMedia, ClipSpec, ClipTweaks, write_clip
from pipeline.transcode.clipgate import check_clips
from pipeline.transcode.clips import analyse, read_manifest, transform_video

# The synthetic scene cuts score 0.26-0.41 on FFmpeg's scene score; 0.2 finds all of them (see the report).
CLIP_OPTIONS = {"scene_cut_threshold": 0.2, "max_clip_duration_s": 10.0, "min_clip_duration_s": 0.5}


def options(**clips: object) -> TranscodeOptions:
    return vendor_with({"profile": "vla", "clips": {**CLIP_OPTIONS, **clips}}, NORTHWIND).transcode


def clip_indices(path: Path) -> list[int]:
    with av.open(str(path)) as container:
        return [read_frame_index(f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]


@pytest.fixture(scope="module")
def scene_clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[int, ...]]:
    path = tmp_path_factory.mktemp("video") / "clip.mp4"
    result = write_clip(path, ClipSpec("c", "clip.mp4", 4.0, seed=3, scene_cuts=2), ClipMedia())
    return path, result.scene_cut_frames


def test_clips_are_cut_at_scene_changes_with_every_frame_kept_in_order(
    scene_clip: tuple[Path, tuple[int, ...]], tmp_path: Path
) -> None:
    source, cuts = scene_clip
    outputs = transform_video(source, tmp_path, options())
    assert len(outputs) == len(cuts) + 1
    starts = [0, *cuts]
    ends = [*cuts, 120]
    for output, first, end in zip(outputs, starts, ends, strict=True):
        indices = clip_indices(tmp_path / output.file)
        assert indices == list(range(first, end))  # 30 fps in, 30 fps out: frame for frame
        assert output.frames == len(indices)
    manifest = read_manifest(tmp_path)
    assert [c["file"] for c in manifest["clips"]] == [o.file for o in outputs]
    with av.open(str(tmp_path / outputs[0].file)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264" and stream.average_rate == Fraction(30)


def test_long_scenes_are_split_and_short_pieces_dropped(
    scene_clip: tuple[Path, tuple[int, ...]], tmp_path: Path
) -> None:
    source, cuts = scene_clip
    outputs = transform_video(source, tmp_path, options(max_clip_duration_s=0.8, min_clip_duration_s=0.5))
    assert all(0.5 - 1 / 30 <= o.frames / 30 <= 0.8 + 1 / 30 for o in outputs)
    assert len(outputs) > len(cuts) + 1
    for output in outputs:
        indices = clip_indices(tmp_path / output.file)
        assert indices == list(range(indices[0], indices[0] + len(indices)))
        assert not any(indices[0] < c <= indices[-1] for c in cuts)  # no clip straddles a cut


def test_display_rotation_and_interlacing_are_applied(tmp_path: Path) -> None:
    rotated = tmp_path / "rotated.mp4"
    write_clip(
        rotated, ClipSpec("r", "r.mp4", 2.0, seed=5, scene_cuts=0), ClipMedia(), ClipTweaks(rotation_deg=90)
    )
    out = transform_video(rotated, tmp_path / "r", options())
    assert (out[0].width, out[0].height) == (240, 320)  # upright: the display matrix is applied
    assert analyse(rotated, options().clips).rotation_deg == 90
    interlaced = tmp_path / "interlaced.mp4"
    write_clip(
        interlaced,
        ClipSpec("i", "i.mp4", 2.0, seed=6, scene_cuts=0),
        ClipMedia(),
        ClipTweaks(interlaced=True),
    )
    assert analyse(interlaced, options().clips).interlaced
    out = transform_video(interlaced, tmp_path / "i", options())
    with av.open(str(tmp_path / "i" / out[0].file)) as container:
        frames = list(container.decode(video=0))
    assert not any(f.interlaced_frame for f in frames)
    assert [read_frame_index(f.to_ndarray(format="rgb24")) for f in frames] == list(range(60))


def _letterboxed(path: Path, bar: int) -> None:
    """A 320x240 clip whose picture is 320x(240 - 2 bar) between black bars."""
    inner = 240 - 2 * bar
    scene = SceneGenerator(320, inner, seed=2)
    buf = yuv420p_buffer(320, inner)[0]
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        for k in range(45):
            rgb = np.zeros((240, 320, 3), dtype=np.uint8)
            picture = av.VideoFrame.from_ndarray(
                scene.render(k / 30, grain_index=k, code=FrameCode(k, 0), out=buf), format="yuv420p"
            )
            rgb[bar : bar + inner] = picture.to_ndarray(format="rgb24")
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def test_black_bars_are_cropped(tmp_path: Path) -> None:
    source = tmp_path / "letterbox.mp4"
    _letterboxed(source, bar=32)
    out = transform_video(source, tmp_path / "o", options())
    assert (out[0].width, out[0].height) == (320, 176)
    assert clip_indices(tmp_path / "o" / out[0].file) == list(range(45))


def test_frames_are_scaled_to_max_pixels(scene_clip: tuple[Path, tuple[int, ...]], tmp_path: Path) -> None:
    source, _ = scene_clip
    small = vendor_with(
        {"profile": "vla", "max_pixels": 160 * 120, "clips": CLIP_OPTIONS}, NORTHWIND
    ).transcode
    out = transform_video(source, tmp_path, small)
    assert {(o.width, o.height) for o in out} == {(160, 120)}


def test_the_post_gate_passes_clean_clips_and_catches_a_wrong_gop(
    scene_clip: tuple[Path, tuple[int, ...]], tmp_path: Path
) -> None:
    source, _ = scene_clip
    transform_video(source, tmp_path, options())
    outcomes = {o.name: o for o in check_clips(tmp_path, source, options(), QualityPost())}
    assert all(o.passed for o in outcomes.values()), outcomes
    judged_as_gop_5 = vendor_with(
        {"profile": "vla", "gop_frames": 5, "clips": CLIP_OPTIONS}, NORTHWIND
    ).transcode
    outcomes = {o.name: o for o in check_clips(tmp_path, source, judged_as_gop_5, QualityPost())}
    assert outcomes["gop"].reason is ReasonCode.GOP_MISMATCH
    judged_as_cavlc = vendor_with(
        {"profile": "vla", "entropy_coder": "cavlc", "clips": CLIP_OPTIONS}, NORTHWIND
    ).transcode
    outcomes = {o.name: o for o in check_clips(tmp_path, source, judged_as_cavlc, QualityPost())}
    assert outcomes["gop"].reason is ReasonCode.GOP_MISMATCH
    assert "parameter sets say ['cabac']" in (outcomes["gop"].detail or "")
    (tmp_path / "clip_000.mp4").write_bytes(b"not a video")
    outcomes = {o.name: o for o in check_clips(tmp_path, source, options(), QualityPost())}
    assert outcomes["decode"].reason is ReasonCode.DECODE_ERROR


def test_a_real_rotated_phone_video_comes_out_upright(corpus_dir: Path, tmp_path: Path) -> None:
    source = corpus_dir / "video" / "sample_rotate_and_reflect.mp4"  # 1080x720 coded, displayed at -90°
    out = transform_video(source, tmp_path, options())
    assert [(o.width, o.height) for o in out] == [(720, 1080)]


def test_a_file_without_video_is_a_recorded_rejection_not_a_crash(corpus_dir: Path, tmp_path: Path) -> None:
    from pipeline.transcode.errors import TranscodeInputError

    with pytest.raises(TranscodeInputError) as caught:
        transform_video(
            corpus_dir / "video" / "sample_audio_only.mp4", tmp_path / "out", options(), staging_dir=tmp_path
        )
    assert caught.value.code is ReasonCode.NO_VIDEO_STREAM
    assert not list(tmp_path.glob("**/*.mp4")) and not list(tmp_path.glob(".*.part"))


def test_a_frame_on_a_split_point_opens_the_later_clip(tmp_path: Path) -> None:
    """3 s at 30 fps split into 1 s pieces: 30 frames each. Float cut points (1.0000000000000002 s) used to
    put frame 30 in the first clip (31/30/29 frames)."""
    path = tmp_path / "three.mp4"
    write_clip(path, ClipSpec("c", "three.mp4", 3.0, seed=4, scene_cuts=0), ClipMedia())
    outputs = transform_video(
        path, tmp_path / "out", options(max_clip_duration_s=1.0, min_clip_duration_s=0.5)
    )
    assert [o.frames for o in outputs] == [30, 30, 30]
    assert [clip_indices(tmp_path / "out" / o.file)[0] for o in outputs] == [0, 30, 60]
