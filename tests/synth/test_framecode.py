"""The frame code: drawn into pixels, read back after real H.264, refused when absent or damaged."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest
from synth_helpers import decode_annexb

from pipeline.media.framecode import (
    MAX_CAMERA_ID,
    MAX_FRAME_INDEX,
    FrameCode,
    FrameCodeError,
    code_pattern,
    draw_frame_code,
    frame_code_region,
    read_frame_code,
    read_frame_index,
)
from pipeline.synth.encode import AnnexBEncoder, H264Settings
from pipeline.synth.scene import SceneGenerator, black_frame


@pytest.mark.parametrize(
    ("index", "camera"), [(0, 0), (1, 15), (MAX_FRAME_INDEX, MAX_CAMERA_ID), (123_456, 7)]
)
def test_round_trip_on_raw_pixels(index: int, camera: int) -> None:
    rgb = np.random.default_rng(index).integers(0, 256, (96, 128, 3), dtype=np.uint8)
    draw_frame_code(rgb, index, camera)
    assert read_frame_code(rgb) == FrameCode(index, camera)


def test_code_stays_in_its_region() -> None:
    rgb = np.full((96, 128, 3), 77, dtype=np.uint8)
    draw_frame_code(rgb, 42)
    width, height = frame_code_region(128, 96)
    assert (width, height) == (64, 48)
    assert (rgb[height:] == 77).all() and (rgb[:, width:] == 77).all()


@pytest.mark.parametrize(
    ("width", "height", "crf"), [(64, 48, 23), (128, 96, 23), (320, 240, 23), (128, 96, 38)]
)
def test_survives_h264(width: int, height: int, crf: int) -> None:
    scene = SceneGenerator(width, height, seed=3)
    encoder = AnnexBEncoder(
        width, height, Fraction(30), H264Settings(preset="veryfast", crf=crf, gop_frames=10)
    )
    units = []
    for k in range(24):
        yuv = scene.render(k / 30, grain_index=k, code=FrameCode(k * 1000 + 1, 5))
        units += [u.data for u in encoder.encode(yuv, pts=k)]
    units += [u.data for u in encoder.flush()]
    frames = decode_annexb(units)
    assert [read_frame_code(f) for f in frames] == [FrameCode(k * 1000 + 1, 5) for k in range(24)]


def test_survives_downscale_and_rotation() -> None:
    rgb = np.random.default_rng(1).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    draw_frame_code(rgb, 4242, 3)
    half = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(width=160, height=120).to_ndarray()
    assert read_frame_index(half) == 4242
    for turns in (1, 2, 3):
        assert read_frame_code(np.rot90(rgb, turns)) == FrameCode(4242, 3)


def test_reads_a_luma_plane() -> None:
    luma = np.full((96, 128), 120, dtype=np.uint8)
    draw_frame_code(luma, 99, black=16, white=235)
    assert read_frame_index(luma) == 99


def test_black_frame_has_no_code() -> None:
    yuv = black_frame(128, 96)
    rgb = av.VideoFrame.from_ndarray(yuv, format="yuv420p").to_ndarray(format="rgb24")
    with pytest.raises(FrameCodeError, match="reference cells differ"):
        read_frame_index(rgb)


def test_noise_has_no_code() -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (96, 128, 3), dtype=np.uint8)
    with pytest.raises(FrameCodeError, match="no frame code readable"):
        read_frame_index(rgb)


def test_damaged_code_is_refused_not_misread() -> None:
    rgb = np.full((96, 128, 3), 128, dtype=np.uint8)
    draw_frame_code(rgb, 1000, 2)
    # Invert one data cell (row 2, column 3): 8x8 pixels at (16, 24).
    rgb[16:24, 24:32] = 255 - rgb[16:24, 24:32]
    with pytest.raises(FrameCodeError, match="check bits"):
        read_frame_code(rgb)


def test_bad_values_name_the_allowed_range() -> None:
    with pytest.raises(FrameCodeError, match=r"0\.\.16777215"):
        code_pattern(MAX_FRAME_INDEX + 1)
    with pytest.raises(FrameCodeError, match=r"0\.\.15"):
        code_pattern(0, 16)
    with pytest.raises(FrameCodeError, match="too small"):
        draw_frame_code(np.zeros((20, 20, 3), dtype=np.uint8), 1)
