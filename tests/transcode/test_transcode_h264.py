"""The bitstream facts the GOP audit reads: the entropy coder from in-band parameter sets (Annex B) and from
an MP4's ``avcC`` record, checked against what x264 was told."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline.config import TrainingProfile
from pipeline.transcode import EncoderSettings
from pipeline.transcode.cameras import make_encoder
from pipeline.transcode.h264 import access_unit_info, avcc_entropy_coders, entropy_coders


def _frames(count: int = 3) -> list[av.VideoFrame]:
    rng = np.random.default_rng(0)
    out = []
    for k in range(count):
        frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (96, 64), dtype=np.uint8), format="yuv420p")
        frame.pts = k
        out.append(frame)
    return out


@pytest.mark.parametrize("preset", ["ultrafast", "veryfast"])
@pytest.mark.parametrize("coder", ["cabac", "cavlc"])
def test_the_profile_sets_the_entropy_coder_whatever_the_preset(preset: str, coder: str) -> None:
    # ultrafast turns CABAC off and veryfast on: the profile's choice must win over both
    settings = EncoderSettings(TrainingProfile.VLA, 10, 0, preset, 23, None, 64 * 64, entropy_coder=coder)
    encoder = make_encoder(64, 64, Fraction(30), settings)
    units = [bytes(p) for f in _frames() for p in encoder.encode(f)] + [
        bytes(p) for p in encoder.encode(None)
    ]
    assert entropy_coders(units[0]) == {coder}  # the IDR carries the parameter sets
    assert entropy_coders(units[1]) == set()  # a P-frame carries none
    # the GOP audit reads the coders in the same pass as the picture type
    assert access_unit_info(units[0]).coders == {coder} and access_unit_info(units[1]).coders == set()


def test_a_parameter_set_cut_short_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="ends inside a header field"):
        entropy_coders(b"\x00\x00\x01\x68")  # a PPS NAL header and nothing after it
    with pytest.raises(ValueError, match="cut short"):
        avcc_entropy_coders(bytes([1, 0x64, 0, 0x1F, 0xFF, 0xE1, 0, 2, 0x67, 0x64]))  # one SPS, no PPS count


@pytest.mark.parametrize("cabac", [0, 1])
def test_the_avcc_record_of_an_mp4_names_its_coder(cabac: int, tmp_path: Path) -> None:
    path = tmp_path / "c.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        stream.options = {"x264-params": f"cabac={cabac}"}
        for frame in _frames():
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with av.open(str(path)) as container:
        extradata = bytes(container.streams.video[0].codec_context.extradata)
    assert avcc_entropy_coders(extradata) == {"cabac" if cabac else "cavlc"}


def test_something_that_is_not_an_avcc_record_is_refused() -> None:
    with pytest.raises(ValueError, match="not an avcC record"):
        avcc_entropy_coders(b"\x00\x00\x00\x01\x67")
