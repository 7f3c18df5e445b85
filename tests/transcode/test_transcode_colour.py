"""A camera's colour matrix: a camera that names one other than BT.601 (a BT.709 HD camera) keeps its YUV
values and the output says the matrix, which untagged would be read as BT.601."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from av.video.codeccontext import VideoCodecContext
from av.video.reformatter import ColorRange
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.records import Channel, Message
from transcode_helpers import PROVENANCE, camera_messages, config_for, rewrite, write_source

from pipeline.config import QualityPost
from pipeline.enums import ReasonCode
from pipeline.transcode import cameras, transcode_episode
from pipeline.transcode.cameras import SCALE_INTERPOLATION
from pipeline.transcode.errors import TranscodeInputError
from pipeline.transcode.postgate import check_episode

FRONT = "/cam/front/h264"
BT709 = 1  # AVColorSpace, AVColorPrimaries and AVColorTransferCharacteristic
UNSPECIFIED, YCGCO = 2, 8  # AVColorSpace


def _decoded(path: Path) -> list[av.VideoFrame]:
    decoder = av.CodecContext.create("h264", "r")
    frames: list[av.VideoFrame] = []
    for message in camera_messages(path, FRONT):
        frames += decoder.decode(av.Packet(message.data))
    return frames + decoder.decode(None)


def _retagged(source: Path, out: Path, matrices: Sequence[int], *, after: int | None = None) -> Path:
    """``source`` whose front camera is re-encoded with its pictures' YUV values tagged with the matrix
    (AVColorSpace) ``matrices[0]`` (a camera that records in it: the same values now mean other colours),
    or from picture ``after`` on, in a new recording's parameter sets, ``matrices[1]``."""
    pictures = _decoded(source)
    units: list[bytes] = []
    cut = len(pictures) if after is None else after
    for matrix, segment in zip(matrices, (pictures[:cut], pictures[cut:]), strict=False):
        encoder = av.CodecContext.create("libx264", "w")
        encoder.width, encoder.height, encoder.pix_fmt = pictures[0].width, pictures[0].height, "yuv420p"
        encoder.time_base = Fraction(1, 30)
        encoder.colorspace = matrix
        if matrix == BT709:
            encoder.color_primaries = encoder.color_trc = BT709
        encoder.color_range = 1
        encoder.options = {"bf": "0", "g": "15", "preset": "ultrafast", "qp": "10"}
        for i, picture in enumerate([*segment, None]):
            if picture is not None:
                picture.pts = i
                picture.pict_type = av.video.frame.PictureType.NONE
            units += [bytes(p) for p in encoder.encode(picture)]
    assert len(units) == len(pictures)
    left = iter(units)

    def edit(channel: Channel, message: Message) -> list[bytes]:
        if channel.topic != FRONT:
            return [message.data]
        video = CompressedVideo.FromString(message.data)
        video.data = next(left)
        return [video.SerializeToString()]

    return rewrite(source, out, edit)


@pytest.fixture(scope="module")
def source_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_source(tmp_path_factory.mktemp("plain") / "source.mcap")


@pytest.fixture(scope="module")
def bt709_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bt709")
    return _retagged(write_source(folder / "source.mcap"), folder / "bt709.mcap", [BT709])


@pytest.mark.parametrize("transcode", [{}, {"max_pixels": 64 * 64}], ids=["same size", "scaled"])
def test_a_bt709_camera_keeps_its_colours(
    bt709_source: Path, tmp_path: Path, transcode: dict[str, int]
) -> None:
    shown = _decoded(bt709_source)
    assert shown[0].colorspace == BT709  # the case this test is about
    out = tmp_path / "episode.mcap"
    transcode_episode(bt709_source, out, config_for("vla", **transcode), PROVENANCE)
    made = _decoded(out)
    assert len(made) == len(shown)
    # the output says the matrix (untagged, its values were read as BT.601)
    assert (made[0].colorspace, made[0].color_primaries, made[0].color_trc) == (BT709,) * 3
    assert made[0].color_range == 1
    # the colours as a reader sees them: per channel, the mean difference over every pixel of every frame
    # (an encode's errors average out, a colour shift does not)
    size = (made[0].width, made[0].height)
    bias = np.mean(
        [
            (
                m.to_ndarray(format="rgb24").astype(np.float64)
                - s.reformat(width=size[0], height=size[1], interpolation=SCALE_INTERPOLATION).to_ndarray(
                    format="rgb24"
                )
            ).mean(axis=(0, 1))
            for m, s in zip(made, shown, strict=True)
        ],
        axis=0,
    )
    # here at most 0.3 levels at the same size and 0.9 scaled (an untagged camera's scaled transcode is off
    # by as much: the scaling, not the colours); swscale's conversion of the matrix gave about -2
    assert np.abs(bias).max() < 1.2, bias


def test_the_post_gate_fails_an_output_that_does_not_name_its_matrix(
    bt709_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transcode as it was before ab7330e, which kept a BT.709 camera's samples but left the output
    untagged (read as BT.601): PSNR compares samples and passes it; the colour check reads the source
    picture's own tags and fails it. The right output passes."""
    config = config_for("vla")
    kept = transcode_episode(bt709_source, tmp_path / "kept.mcap", config, PROVENANCE)
    outcomes = {o.name: o for o in check_episode(kept.path, bt709_source, config, QualityPost())}
    assert outcomes["colour"].passed, outcomes["colour"]
    front = outcomes["colour"].observed["cameras"]["front"]
    assert (front["source"], front["output"]) == (["bt709"], ["bt709"])
    assert front["chroma_shift_max"] < 1.0
    monkeypatch.setattr(cameras, "tag_colour", lambda encoder, frame: None)
    untagged = transcode_episode(bt709_source, tmp_path / "untagged.mcap", config, PROVENANCE)
    outcomes = {o.name: o for o in check_episode(untagged.path, bt709_source, config, QualityPost())}
    assert outcomes["colour"].reason is ReasonCode.COLOUR_MISMATCH
    assert outcomes["colour"].detail == "camera front: read as bt601, its source as bt709"
    assert outcomes["psnr"].passed, outcomes["psnr"]


def test_the_post_gate_fails_a_colour_cast(
    source_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An encoder input whose Cr is 6 levels high (a cast a viewer sees, red up by about 9 levels): the
    chroma PSNR stays above 30 dB, the mean chroma shift fails it."""
    config = config_for("vla")
    given = cameras.encoder_picture

    def cast(frame: av.VideoFrame, width: int, height: int) -> av.VideoFrame:
        picture = given(frame, width, height)
        planes = picture.to_ndarray()  # yuv420p: Y rows, then the U and V planes' rows
        v = planes[height + height // 4 :]
        v[:] = np.clip(v.astype(np.int16) + 6, 0, 255).astype(np.uint8)
        return av.VideoFrame.from_ndarray(planes, format="yuv420p")

    monkeypatch.setattr(cameras, "encoder_picture", cast)
    out = transcode_episode(source_path, tmp_path / "cast.mcap", config, PROVENANCE).path
    monkeypatch.undo()
    outcomes = {o.name: o for o in check_episode(out, source_path, config, QualityPost())}
    assert outcomes["psnr"].passed, outcomes["psnr"]
    assert outcomes["colour"].reason is ReasonCode.COLOUR_MISMATCH
    assert "mean chroma shifted by" in (outcomes["colour"].detail or "")
    assert outcomes["colour"].observed["cameras"]["front"]["chroma_shift_max"] > 5


@pytest.mark.parametrize("transcode", [{}, {"max_pixels": 64 * 64}], ids=["same size", "scaled"])
def test_a_camera_in_a_matrix_the_transcode_cannot_keep_is_refused(
    source_path: Path, tmp_path: Path, transcode: dict[str, int]
) -> None:
    """YCgCo: kept as it was, the output (untagged) would be read as BT.601; scaled, swscale failed with a
    bare OSError (errno 95) out of the transcode."""
    ycgco = _retagged(source_path, tmp_path / "ycgco.mcap", [YCGCO])
    assert _decoded(ycgco)[0].colorspace == YCGCO  # the case
    with pytest.raises(TranscodeInputError) as caught:
        transcode_episode(ycgco, tmp_path / "out.mcap", config_for("vla", **transcode), PROVENANCE)
    assert caught.value.code is ReasonCode.UNSUPPORTED_ENCODING
    assert "camera front: its pictures name the colour matrix ycgco" in str(caught.value)


def test_a_camera_whose_matrix_changes_mid_stream_is_refused(source_path: Path, tmp_path: Path) -> None:
    """Untagged, then BT.709 from picture 20 (a recording spliced from two): the output, tagged once,
    would show part of the camera in other colours."""
    spliced = _retagged(source_path, tmp_path / "spliced.mcap", [UNSPECIFIED, BT709], after=20)
    assert [f.colorspace for f in _decoded(spliced)][19:21] == [UNSPECIFIED, BT709]  # the case
    with pytest.raises(TranscodeInputError) as caught:
        transcode_episode(spliced, tmp_path / "out.mcap", config_for("vla"), PROVENANCE)
    assert caught.value.code is ReasonCode.COLOUR_MISMATCH
    assert "camera front: picture 20 names the colour matrix bt709, the stream began in bt601" in str(
        caught.value
    )


def test_the_post_gate_fails_an_output_that_says_full_range(
    bt709_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Limited-range samples tagged full range (readers show them washed out, black at 16): the samples
    are right, so PSNR and the chroma shift pass it; the range it is read in fails it."""
    config = config_for("vla")
    tag = cameras.tag_colour

    def full_range(encoder: VideoCodecContext, frame: av.VideoFrame) -> None:
        tag(encoder, frame)
        encoder.color_range = ColorRange.JPEG

    monkeypatch.setattr(cameras, "tag_colour", full_range)
    out = transcode_episode(bt709_source, tmp_path / "full.mcap", config, PROVENANCE).path
    assert _decoded(out)[0].color_range == ColorRange.JPEG  # the case
    outcomes = {o.name: o for o in check_episode(out, bt709_source, config, QualityPost())}
    assert outcomes["colour"].reason is ReasonCode.COLOUR_MISMATCH
    assert outcomes["colour"].detail == "camera front: read as full range, its samples limited range"
    assert outcomes["colour"].observed["cameras"]["front"]["output_range"] == ["full"]
    assert outcomes["psnr"].passed, outcomes["psnr"]


def _picture(fmt: str, colorspace: int = UNSPECIFIED) -> av.VideoFrame:
    frame = av.VideoFrame(16, 16, fmt)
    frame.colorspace = colorspace
    return frame


@pytest.mark.parametrize(
    ("fmt", "colorspace", "matrix"),
    [
        ("yuv420p", UNSPECIFIED, "bt601"),
        ("yuvj420p", 5, "bt601"),  # FFmpeg's MJPEG decoder: BT.470BG
        ("yuv422p", 6, "bt601"),  # SMPTE 170M, BT.601's other tag
        ("gray", UNSPECIFIED, "bt601"),  # a gray JPEG or PNG: converted with BT.601
        ("rgb24", 0, "bt601"),  # a PNG's RGB, tagged "RGB"
        ("pal8", UNSPECIFIED, "bt601"),  # a palette PNG
        ("bayer_rggb8", UNSPECIFIED, "bt601"),
        ("yuyv422", UNSPECIFIED, "bt601"),  # a raw yuv422 Image
        ("yuv420p10le", BT709, "bt709"),
        ("yuv420p", YCGCO, "ycgco"),
        ("yuv420p", 0, "rgb"),  # YUV samples tagged as RGB: no matrix to read them with
    ],
)
def test_the_matrix_a_picture_is_read_in(fmt: str, colorspace: int, matrix: str) -> None:
    """What the guard and the post-gate compare: a JPEG camera that mixes gray and colour pictures, or a
    PNG one that mixes palette, gray and RGB ones, reads as one matrix throughout."""
    assert cameras.colour_matrix(_picture(fmt, colorspace)) == matrix
