"""A camera's colour matrix: a camera that names one other than BT.601 (a BT.709 HD camera) keeps its YUV
values and the output says the matrix, which untagged would be read as BT.601."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.records import Channel, Message
from transcode_helpers import PROVENANCE, camera_messages, config_for, rewrite, write_source

from pipeline.config import QualityPost
from pipeline.enums import ReasonCode
from pipeline.transcode import transcode_episode
from pipeline.transcode.cameras import SCALE_INTERPOLATION
from pipeline.transcode.postgate import check_episode

FRONT = "/cam/front/h264"
BT709 = 1  # AVColorSpace, AVColorPrimaries and AVColorTransferCharacteristic


def _decoded(path: Path) -> list[av.VideoFrame]:
    decoder = av.CodecContext.create("h264", "r")
    frames: list[av.VideoFrame] = []
    for message in camera_messages(path, FRONT):
        frames += decoder.decode(av.Packet(message.data))
    return frames + decoder.decode(None)


def _as_bt709(source: Path, out: Path) -> Path:
    """``source`` whose front camera is re-encoded with its pictures' YUV values tagged BT.709 (a camera
    that records in that matrix): the same values now mean other colours."""
    pictures = _decoded(source)
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = pictures[0].width, pictures[0].height, "yuv420p"
    encoder.time_base = Fraction(1, 30)
    encoder.colorspace = encoder.color_primaries = encoder.color_trc = BT709
    encoder.color_range = 1
    encoder.options = {"bf": "0", "g": "15", "preset": "ultrafast", "qp": "10"}
    units: list[bytes] = []
    for i, picture in enumerate([*pictures, None]):
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
def bt709_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bt709")
    return _as_bt709(write_source(folder / "source.mcap"), folder / "bt709.mcap")


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


def test_the_post_gate_fails_an_output_read_as_other_colours_than_its_source(
    bt709_source: Path, tmp_path: Path
) -> None:
    """The untagged camera's output judged against the BT.709 camera: the same samples, so PSNR passes
    it, but read as BT.601 they are other colours (the transcode's own fault before ab7330e, which no
    check caught). The BT.709 camera's own output passes."""
    config = config_for("vla")
    kept = transcode_episode(bt709_source, tmp_path / "kept.mcap", config, PROVENANCE)
    outcomes = {o.name: o for o in check_episode(kept.path, bt709_source, config, QualityPost())}
    assert outcomes["colour"].passed, outcomes["colour"]
    assert outcomes["colour"].observed["cameras"]["front"] == {
        "source": ["bt709 limited range"],
        "output": ["bt709 limited range"],
    }
    untagged_source = bt709_source.with_name("source.mcap")
    untagged = transcode_episode(untagged_source, tmp_path / "untagged.mcap", config, PROVENANCE)
    outcomes = {o.name: o for o in check_episode(untagged.path, bt709_source, config, QualityPost())}
    assert outcomes["colour"].reason is ReasonCode.COLOUR_MISMATCH
    assert outcomes["colour"].detail == (
        "camera front: the output is read as bt601 limited range, its source as bt709 limited range"
    )
    assert outcomes["psnr"].passed, outcomes["psnr"]
