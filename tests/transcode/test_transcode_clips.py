"""Video-vendor transform: clips cut at scene changes, upright, cropped, constant rate, checked."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
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
from pipeline.transcode import publish
from pipeline.transcode.clipgate import check_clips
from pipeline.transcode.clips import analyse, read_manifest, transform_video
from pipeline.transcode.errors import TranscodeInputError

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


def test_the_post_gate_compares_each_clip_frame_with_its_own_source_frame(tmp_path: Path) -> None:
    """Split points like 1.0000000000000002 s: the transform puts the frame at 1.0 s in the later clip, and
    the gate must too, or every later sample is compared with its neighbour's source frame."""
    path = tmp_path / "three.mp4"
    write_clip(path, ClipSpec("c", "three.mp4", 3.0, seed=4, scene_cuts=0), ClipMedia())
    split = options(max_clip_duration_s=1.0, min_clip_duration_s=0.5)
    transform_video(path, tmp_path / "out", split)
    outcomes = {o.name: o for o in check_clips(tmp_path / "out", path, split, QualityPost())}
    assert outcomes["psnr"].passed, outcomes["psnr"]
    # Every sampled frame, the last of each clip included, found its source frame and matches it closely.
    assert outcomes["psnr"].observed["frames"] == 3 * QualityPost().psnr_sample_frames
    assert outcomes["psnr"].observed["min_db"] >= 35.0


def test_the_post_gate_holds_a_few_pictures_however_many_clips_it_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each clip is decoded in step with the source: a sampled picture is compared when both sides reach
    it, not kept until the source decode (12 clips x 8 samples held 96 pictures, 600 MB for 47 clips of
    720p)."""
    path = tmp_path / "six.mp4"
    write_clip(path, ClipSpec("c", "six.mp4", 6.0, seed=4, scene_cuts=0), ClipMedia())
    split = options(max_clip_duration_s=0.5, min_clip_duration_s=0.5)
    outputs = transform_video(path, tmp_path / "out", split)
    assert len(outputs) == 12
    monkeypatch.setattr(publish, "HASH_BLOCK_BYTES", 1 << 16)  # its 8 MiB read buffer is not the subject
    picture = ClipMedia().width * ClipMedia().height * 3 // 2
    tracemalloc.start()
    try:
        outcomes = {o.name: o for o in check_clips(tmp_path / "out", path, split, QualityPost())}
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all(o.passed for o in outcomes.values()), outcomes
    assert outcomes["psnr"].observed["frames"] == 12 * QualityPost().psnr_sample_frames
    assert peak < 16 * picture, f"{peak / picture:.1f} pictures held at once"


def _faststart(source: Path, path: Path) -> list[int]:
    """Remux ``source`` with its index first (so a cut-off file still opens); returns packet byte offsets."""
    offsets = []
    with (
        av.open(str(source)) as src,
        av.open(str(path), "w", format="mp4", options={"movflags": "faststart"}) as out,
    ):
        stream = out.add_stream_from_template(src.streams.video[0])
        for packet in src.demux(src.streams.video[0]):
            if packet.dts is None:
                continue
            packet.stream = stream
            out.mux(packet)
    with av.open(str(path)) as container:
        offsets = [p.pos for p in container.demux(video=0) if p.size]
    return offsets


def test_a_cut_off_source_is_rejected_before_any_clip_is_written(
    scene_clip: tuple[Path, tuple[int, ...]], tmp_path: Path
) -> None:
    source, cuts = scene_clip
    whole = tmp_path / "whole.mp4"
    offsets = _faststart(source, whole)
    broken = tmp_path / "broken.mp4"
    # Cut inside a frame of the second scene, as a half-uploaded video is: FFmpeg then fails with invalid
    # data there. The analysis decode reads the whole source first, so it fails before any clip exists.
    broken.write_bytes(whole.read_bytes()[: offsets[(cuts[0] + cuts[1]) // 2] + 100])
    out, staging = tmp_path / "out", tmp_path / "staging"
    with pytest.raises(TranscodeInputError) as caught:
        transform_video(broken, out, options(), staging_dir=staging)
    assert caught.value.code is ReasonCode.DECODE_ERROR
    assert not list(out.glob("*")) and not list(staging.glob("*"))


_TRANSFORM_UNDER_A_FILE_SIZE_LIMIT = """
import json, resource, sys
from pathlib import Path
from pipeline.config import TranscodeOptions
from pipeline.transcode.clips import transform_video
source, out, staging, options, limit = sys.argv[1:]
resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))  # Python ignores SIGXFSZ: writes fail
try:
    transform_video(Path(source), Path(out), TranscodeOptions.model_validate_json(options), staging_dir=Path(staging))
    error = None
except Exception as exc:
    error = type(exc).__name__
left = sorted(str(p.relative_to(d)) for d in (Path(out), Path(staging)) if d.exists() for p in d.iterdir())
print(json.dumps({"error": error, "left": left}))
"""


def test_a_failure_while_writing_a_later_clip_leaves_no_clip_behind(tmp_path: Path) -> None:
    """Clips are published together with their manifest, after the whole source went through: a failure on
    the second clip (here the file size limit, as a full disk would) must not leave the first one out."""
    source = tmp_path / "c.mp4"
    write_clip(source, ClipSpec("c", "c.mp4", 3.0, seed=10, scene_cuts=1), ClipMedia())  # cut at frame 24
    opts = options()
    first, second = transform_video(source, tmp_path / "whole", opts)
    assert second.size_bytes > 1.5 * first.size_bytes  # 66 frames against 24: a limit fits between them
    limit = (first.size_bytes + second.size_bytes) // 2
    out, staging = tmp_path / "out", tmp_path / "staging"
    args = [source, out, staging, opts.model_dump_json(), limit]
    run = subprocess.run(
        [sys.executable, "-c", _TRANSFORM_UNDER_A_FILE_SIZE_LIMIT, *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["error"] is not None
    assert result["left"] == []


def _offset_copy(source: Path, path: Path, first_frame: int) -> None:
    """Remux ``source`` (30 fps) so that its first frame shows at ``first_frame`` / 30 s, not 0."""
    with av.open(str(source)) as src, av.open(str(path), "w", format="mp4") as out:
        stream = src.streams.video[0]
        shift = int(first_frame / (30 * stream.time_base))
        copy = out.add_stream_from_template(stream)
        for packet in src.demux(stream):
            if packet.dts is None:
                continue
            packet.pts += shift
            packet.dts += shift
            packet.stream = copy
            out.mux(packet)


def test_clips_are_planned_from_the_first_frame_not_from_zero(tmp_path: Path) -> None:
    """A 0.8 s opening scene in a file whose first frame is at 1.5 s is 0.8 s long, not 2.3 s: under a 1 s
    minimum it is dropped."""
    source = tmp_path / "plain.mp4"
    result = write_clip(source, ClipSpec("c", "c.mp4", 3.0, seed=10, scene_cuts=1), ClipMedia())
    assert result.scene_cut_frames == (24,)
    shifted = tmp_path / "shifted.mp4"
    _offset_copy(source, shifted, 45)
    opts = options(min_clip_duration_s=1.0)
    analysis = analyse(shifted, opts.clips)
    assert analysis.first_frame_s == pytest.approx(1.5)
    assert analysis.duration_s == pytest.approx(3.0)
    assert analysis.scene_cuts_s == pytest.approx((1.5 + 24 / 30,))
    outputs = transform_video(shifted, tmp_path / "out", opts)
    assert [(o.start_s, o.end_s) for o in outputs] == [pytest.approx((1.5 + 24 / 30, 4.5))]
    assert clip_indices(tmp_path / "out" / outputs[0].file) == list(range(24, 90))


def test_a_scene_of_exactly_the_minimum_length_is_a_clip() -> None:
    """60 frames at 30 fps with cuts at 0.6 s and 1.0 s (the demo's first clip): the last scene is 30 frames,
    exactly min_clip_duration_s, though the frame sums make the clip 1.9999999999999998 s long."""
    from pipeline.config import ClipOptions
    from pipeline.transcode.clips import Analysis, plan_clips

    duration = 1.9999999999999998  # what analyse() measured for the demo's 2 s clip (frame times summed)
    analysis = Analysis(320, 240, 0, False, None, (0.6, 1.0), duration, 60)
    plans = plan_clips(analysis, ClipOptions(min_clip_duration_s=1.0))
    assert [(round(p.start_s, 6), round(p.end_s, 6)) for p in plans] == [(1.0, 2.0)]


def test_a_real_bt709_video_keeps_its_colours(corpus_dir: Path, tmp_path: Path) -> None:
    """A 1280x720 BT.709 recording (the corpus's emulator capture, turned 180°): its clip says BT.709 and
    limited range, and shows the source's colours. The filter graph's source named neither, so the clip
    came out untagged, read as BT.601: 1.5-3 levels off per channel on average."""
    source = corpus_dir / "video" / "internal_emulator_transformer_output_180_rotated.mp4"
    (clip,) = transform_video(source, tmp_path, options())
    with av.open(str(source)) as container:
        shown = next(container.decode(video=0))
    with av.open(str(tmp_path / clip.file)) as container:
        made = next(container.decode(video=0))
    assert (shown.colorspace, shown.color_primaries, shown.color_trc) == (1, 1, 1)  # the case
    assert (made.colorspace, made.color_range, made.color_primaries, made.color_trc) == (1, 1, 1, 1)
    # turned 180°, so compared by each channel's mean over the picture
    mean_made = made.to_ndarray(format="rgb24").mean(axis=(0, 1))
    mean_shown = shown.to_ndarray(format="rgb24").mean(axis=(0, 1))
    np.testing.assert_allclose(mean_made, mean_shown, atol=0.5)
    outcomes = {o.name: o for o in check_clips(tmp_path, source, options(), QualityPost())}
    assert all(o.passed for o in outcomes.values()), outcomes
    colour = outcomes["colour"].observed
    assert (colour["source"], colour["output"]) == (["bt709"], ["bt709"])


def test_the_post_gate_fails_clips_that_do_not_name_their_source_s_matrix(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clips' filter graph as it was before ab7330e (its source made from the stream, which names no
    matrix): the BT.709 video's clips come out untagged, read as BT.601. PSNR compares samples and passes
    them; the colour check reads the source's own first picture, not the graph, and fails them."""
    from pipeline.transcode import clips

    def old_buffer(
        graph: av.filter.Graph, stream: av.video.stream.VideoStream, first: av.VideoFrame
    ) -> object:
        return graph.add_buffer(template=stream)

    monkeypatch.setattr(clips, "_buffer", old_buffer)  # in the transform and the post-gate's decode alike
    source = corpus_dir / "video" / "internal_emulator_transformer_output_180_rotated.mp4"
    transform_video(source, tmp_path, options())
    outcomes = {o.name: o for o in check_clips(tmp_path, source, options(), QualityPost())}
    assert outcomes["colour"].reason is ReasonCode.COLOUR_MISMATCH
    assert outcomes["colour"].detail == "clips read as bt601, its source as bt709"
    assert outcomes["psnr"].passed, outcomes["psnr"]


def test_an_hdr_video_s_clips_keep_its_transfer_and_the_post_gate_checks_it(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The corpus's 10-bit BT.2020 HLG phone video: its clip says HLG (not tone-mapped), and a clip that
    lost the transfer, which a player would show as SDR (washed out), fails the colour check."""
    from pipeline.transcode import clips

    source = corpus_dir / "video" / "sample_edit_list_no_sync_frame_before_edit.mp4"
    transform_video(source, tmp_path / "kept", options())
    outcomes = {o.name: o for o in check_clips(tmp_path / "kept", source, options(), QualityPost())}
    assert all(o.passed for o in outcomes.values()), outcomes
    assert outcomes["colour"].observed["output"] == ["bt2020nc hlg"]
    tag = clips.tag_colour

    def sdr(encoder: av.video.codeccontext.VideoCodecContext, frame: av.VideoFrame) -> None:
        tag(encoder, frame)
        encoder.color_trc = 2  # unspecified

    monkeypatch.setattr(clips, "tag_colour", sdr)
    transform_video(source, tmp_path / "lost", options())
    outcomes = {o.name: o for o in check_clips(tmp_path / "lost", source, options(), QualityPost())}
    assert outcomes["colour"].reason is ReasonCode.COLOUR_MISMATCH
    assert outcomes["colour"].detail == "clips read as bt2020nc, its source as bt2020nc hlg"


def test_a_video_in_a_matrix_the_transcode_cannot_keep_is_refused(tmp_path: Path) -> None:
    """YCgCo, which swscale cannot convert from: refused before any clip is written."""
    source = tmp_path / "ycgco.mp4"
    with av.open(str(source), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.codec_context.colorspace = 8  # AVCOL_SPC_YCGCO
        stream.options = {"preset": "ultrafast", "g": "10", "bf": "0"}
        for i in range(30):
            frame = av.VideoFrame.from_ndarray(np.zeros((72, 64), np.uint8) + 100, format="yuv420p")
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with pytest.raises(TranscodeInputError) as caught:
        transform_video(source, tmp_path / "out", options())
    assert caught.value.code is ReasonCode.UNSUPPORTED_ENCODING
    assert "ycgco.mp4: its pictures name the colour matrix ycgco" in str(caught.value)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_video_whose_matrix_changes_mid_stream_is_refused(tmp_path: Path) -> None:
    """Untagged for a second, then BT.709: the clips, tagged once, would show part of it in other colours."""
    source = tmp_path / "changes.h264"  # an Annex B stream: two recordings spliced, the second's SPS BT.709
    red = av.VideoFrame.from_ndarray(np.full((48, 64, 3), (200, 40, 40), np.uint8), format="rgb24")
    with open(source, "wb") as out:
        for first, bt709 in ((0, False), (30, True)):
            encoder = av.CodecContext.create("libx264", "w")
            encoder.width, encoder.height, encoder.pix_fmt = 64, 48, "yuv420p"
            encoder.time_base = Fraction(1, 30)
            if bt709:
                encoder.colorspace = encoder.color_primaries = encoder.color_trc = encoder.color_range = 1
            encoder.options = {"preset": "ultrafast", "g": "10", "bf": "0"}
            for i in [*range(first, first + 30), None]:
                frame = None
                if i is not None:
                    frame = red.reformat(format="yuv420p")
                    frame.pts = i
                for packet in encoder.encode(frame):
                    out.write(bytes(packet))
    with av.open(str(source)) as container:
        assert [f.colorspace for f in container.decode(video=0)][28:32] == [2, 2, 1, 1]  # the case
    with pytest.raises(TranscodeInputError) as caught:
        transform_video(source, tmp_path / "out", options())
    assert caught.value.code is ReasonCode.COLOUR_MISMATCH
    assert "picture 30 names the colour matrix bt709, the stream began in bt601" in str(caught.value)


def test_a_full_range_video_comes_out_limited_range_and_passes_its_post_gate(tmp_path: Path) -> None:
    """A full-range vendor video (a camera that records yuvj420p): the clip is limited range, as it says,
    with the source's contrast, and the post-gate compares it with the source as the encoder was given it
    (compared with the full-range frames, a clean clip scored 30 dB and failed)."""
    from av.video.reformatter import ColorRange, Colorspace

    y, x = np.mgrid[0:240, 0:320]
    source = tmp_path / "full.mp4"
    with av.open(str(source), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        stream.codec_context.color_range = ColorRange.JPEG
        stream.codec_context.colorspace = stream.codec_context.color_primaries = 1
        stream.codec_context.color_trc = 1
        stream.options = {"preset": "ultrafast", "g": "30", "bf": "0", "qp": "10"}
        for i in range(60):
            rgb = np.stack([(x + 3 * i) % 256, y, 255 - x * 255 // 320], axis=-1).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(
                format="yuv420p", dst_colorspace=Colorspace.ITU709, dst_color_range=ColorRange.JPEG
            )
            frame.color_range, frame.pts = ColorRange.JPEG, i
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    (clip,) = transform_video(source, tmp_path / "out", options())
    with av.open(str(source)) as container:
        shown = next(container.decode(video=0))
    with av.open(str(tmp_path / "out" / clip.file)) as container:
        made = next(container.decode(video=0))
    assert shown.color_range == ColorRange.JPEG  # the case this test is about
    assert (made.color_range, made.colorspace) == (ColorRange.MPEG, 1)
    luma = made.to_ndarray()[:240]
    assert luma.min() >= 14 and luma.max() <= 240  # limited-range samples (a full-range copy: 0-255)
    np.testing.assert_allclose(
        made.to_ndarray(format="rgb24").mean(axis=(0, 1)),
        shown.to_ndarray(format="rgb24").mean(axis=(0, 1)),
        atol=1.0,
    )
    outcomes = {o.name: o for o in check_clips(tmp_path / "out", source, options(), QualityPost())}
    assert all(o.passed for o in outcomes.values()), outcomes
    assert outcomes["psnr"].observed["min_db"] > 40, outcomes["psnr"].observed
    assert outcomes["colour"].observed["output"] == ["bt709"]
