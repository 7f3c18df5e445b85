"""Pictures out of their messages: formats named as writers name them, strict still-image decoding with the
frame and byte offset of a bad one, raw pictures with padded rows, and the table's own consistency."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from pipeline.enums import ReasonCode
from pipeline.families import (
    CAMERA_FAMILIES,
    PIXEL_ENCODINGS,
    FrameDecoder,
    FrameKind,
    FramePayload,
    MessageFamilyError,
    RawLayout,
    camera_family,
    raw_frame,
    read_payload,
)
from pipeline.families.structure import image_size, jpeg_problem, png_problem
from pipeline.families.table import image_format, video_format
from pipeline.media.framecode import FrameCode, read_frame_index
from pipeline.synth.encode import RAW_ENCODINGS, StillEncoder, raw_picture
from pipeline.synth.scene import SceneGenerator, yuv420p_buffer

W, H = 128, 96


def _picture(k: int = 5) -> np.ndarray:
    buf = yuv420p_buffer(W, H)[0]
    SceneGenerator(W, H, seed=3).render(k / 30, grain_index=k, code=FrameCode(k, 2), out=buf)
    return buf


@pytest.mark.parametrize(
    ("text", "expected"),
    [("jpeg", "jpeg"), ("JPG", "jpeg"), ("rgb8; jpeg compressed bgr8", "jpeg"), ("png", "png"),
     ("bgr8; compressed png", "png"), ("webp", None), ("", None)],
)  # fmt: skip
def test_image_formats_as_writers_name_them(text: str, expected: str | None) -> None:
    assert image_format(text) == expected


def test_video_formats() -> None:
    assert [video_format(t) for t in ("h264", "H265", "hevc", "vp9")] == ["h264", "h265", "h265", None]


def test_schema_names_are_known_with_and_without_msg() -> None:
    for name in ("sensor_msgs/msg/CompressedImage", "sensor_msgs/CompressedImage", "foxglove.RawImage"):
        assert camera_family(name) is not None
    assert camera_family("std_msgs/msg/String") is None
    assert len({n for f in CAMERA_FAMILIES for n in f.schema_names}) == sum(
        len(f.schema_names) for f in CAMERA_FAMILIES
    )


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_a_whole_still_image_decodes_to_its_drawn_frame(fmt: str) -> None:
    data = StillEncoder(W, H, fmt).encode(_picture())
    assert (jpeg_problem if fmt == "jpeg" else png_problem)(data) is None
    assert image_size(fmt, data) == (W, H)
    frames = FrameDecoder(FrameKind.IMAGE, fmt, what="cam").decode(4, FramePayload(fmt, data, fmt))
    assert [f.pts for f in frames] == [4]
    assert read_frame_index(frames[0].to_ndarray(format="rgb24")) == 5


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_a_picture_cut_short_is_a_decode_error_at_its_frame_and_offset(fmt: str) -> None:
    data = StillEncoder(W, H, fmt).encode(_picture())
    cut = data[: len(data) * 6 // 10]
    with pytest.raises(MessageFamilyError) as caught:
        FrameDecoder(FrameKind.IMAGE, fmt, what="cam").decode(9, FramePayload(fmt, cut, fmt))
    assert caught.value.code is ReasonCode.DECODE_ERROR
    assert caught.value.frame == 9
    assert caught.value.offset is not None and caught.value.offset <= len(cut)
    assert "frame 9" in caught.value.detail


def test_a_png_with_a_flipped_byte_fails_its_chunk_crc() -> None:
    data = bytearray(StillEncoder(W, H, "png").encode(_picture()))
    data[len(data) // 2] ^= 0x10
    problem = png_problem(bytes(data))
    assert problem is not None and "CRC mismatch" in problem[1]


def test_the_jpeg_walk_reads_segments_not_bytes() -> None:
    data = StillEncoder(W, H, "jpeg").encode(_picture())
    assert jpeg_problem(data + b"\x00" * 7) is None  # trailing padding after EOI is common and harmless
    assert jpeg_problem(b"\x89PNG" + data[4:]) == (
        0,
        "does not start with the JPEG SOI marker (starts 89504e47)",
    )
    # a segment whose length runs past the end
    bad = data[:2] + b"\xff\xe0" + struct.pack(">H", 0xFFF0) + data[6:40]
    problem = jpeg_problem(bad)
    assert problem is not None and problem[0] == 2 and "claims 65520 bytes" in problem[1]


def test_a_payload_that_says_jpeg_but_is_png_is_refused() -> None:
    data = StillEncoder(W, H, "png").encode(_picture())
    with pytest.raises(MessageFamilyError, match="starts with a png signature"):
        FrameDecoder(FrameKind.IMAGE, "jpeg", what="cam").decode(0, FramePayload("jpeg", data, "jpeg"))


def test_the_png_decoder_is_not_reused_across_pictures() -> None:
    """FFmpeg's PNG decoder, reused, returns the second picture damaged (the bug this guards)."""
    decoder = FrameDecoder(FrameKind.IMAGE, "png", what="cam")
    encoder = StillEncoder(W, H, "png")
    for k in (1, 2, 3):
        data = encoder.encode(_picture(k))
        frame = decoder.decode(k, FramePayload("png", data, "png"))[0]
        assert read_frame_index(frame.to_ndarray(format="rgb24")) == k


def test_the_table_and_the_synthesiser_agree_on_raw_encodings() -> None:
    assert set(RAW_ENCODINGS) <= set(PIXEL_ENCODINGS)


@pytest.mark.parametrize("encoding", sorted(RAW_ENCODINGS))
def test_raw_pictures_with_padded_rows_give_back_their_pixels(encoding: str) -> None:
    data, step = raw_picture(_picture(), encoding, W, H)
    assert step > W * PIXEL_ENCODINGS[encoding].bytes_per_pixel  # the rows are padded
    frame = raw_frame(data, RawLayout(W, H, encoding, step))
    assert read_frame_index(frame.to_ndarray(format="rgb24")) == 5


def test_a_raw_picture_without_its_last_rows_padding_still_reads() -> None:
    data, step = raw_picture(_picture(), "rgb8", W, H)
    trimmed = data[: step * (H - 1) + W * 3]
    frame = raw_frame(trimmed, RawLayout(W, H, "rgb8", step))
    assert read_frame_index(frame.to_ndarray(format="rgb24")) == 5


class _Image:
    """A decoded sensor_msgs/Image as the CDR decoder gives one (attributes)."""

    def __init__(self, **fields: object) -> None:
        self.__dict__.update(fields)


def _image(**overrides: object) -> _Image:
    fields = {
        "height": H,
        "width": W,
        "encoding": "rgb8",
        "is_bigendian": 0,
        "step": W * 3,
        "data": bytes(W * 3 * H),
    }
    return _Image(**{**fields, **overrides})


def test_a_wrong_step_is_a_decode_error_saying_so() -> None:
    family = camera_family("sensor_msgs/msg/Image")
    assert family is not None
    assert read_payload(family, _image(), frame=0, what="cam").raw == RawLayout(W, H, "rgb8", W * 3)
    with pytest.raises(MessageFamilyError, match="step 383 bytes is shorter than a row") as short:
        read_payload(family, _image(step=W * 3 - 1), frame=3, what="cam")
    assert (short.value.code, short.value.frame) == (ReasonCode.DECODE_ERROR, 3)
    with pytest.raises(MessageFamilyError, match="bytes of data for 96 rows of step 400"):
        read_payload(family, _image(step=400), frame=3, what="cam")


def test_an_unknown_pixel_encoding_is_unsupported() -> None:
    family = camera_family("sensor_msgs/msg/Image")
    assert family is not None
    with pytest.raises(MessageFamilyError, match="pixel encoding '32fc1'") as caught:
        read_payload(family, _image(encoding="32FC1"), frame=0, what="cam")
    assert caught.value.code is ReasonCode.UNSUPPORTED_ENCODING


def test_big_endian_mono16_is_read_as_big_endian() -> None:
    values = (np.arange(W * H, dtype=np.uint16).reshape(H, W) * 7).astype(">u2")
    frame = raw_frame(values.tobytes(), RawLayout(W, H, "mono16", W * 2, big_endian=True))
    assert frame.format.name == "gray16be"
    little = frame.reformat(format="gray16le").to_ndarray()
    assert np.array_equal(little, values.astype(np.uint16))


def test_json_payloads_carry_bytes_as_base64() -> None:
    import base64

    family = camera_family("foxglove.CompressedImage")
    assert family is not None
    data = StillEncoder(W, H, "jpeg").encode(_picture())
    payload = read_payload(
        family, {"format": "jpeg", "data": base64.b64encode(data).decode()}, frame=0, what="cam"
    )
    assert payload.data == data and payload.format == "jpeg"
    assert zlib.crc32(payload.data) == zlib.crc32(data)
