"""Camera messages to pictures: take the picture out of a decoded message, then decode it to a PyAV frame.

:func:`read_payload` reads one decoded camera message (CDR, protobuf or JSON) through its family's row in
:mod:`pipeline.families.table`; :class:`FrameDecoder` turns a stream of payloads into ``av.VideoFrame`` s
whose ``pts`` is the index of the message they came from. Both raise :class:`MessageFamilyError` with the
frame index (and the byte offset when there is one), which steps record as a rejection.

Still images are decoded with FFmpeg told to stop at any error (``err_detect=explode``): by default its
JPEG decoder returns a half-grey picture for a frame cut short, which would pass a size check and go into
a training set.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import av
import numpy as np

from pipeline.enums import ReasonCode
from pipeline.families.errors import MessageFamilyError
from pipeline.families.structure import check_image, sniff_image
from pipeline.families.table import (
    IMAGE_DECODERS,
    PIXEL_ENCODINGS,
    VIDEO_DECODERS,
    CameraFamily,
    FrameKind,
    image_format,
    pixel_layout,
    video_format,
)
from pipeline.mcaplog.decode import value_at

#: FFmpeg decoder options for still images: fail on any bitstream error instead of concealing it.
STRICT_IMAGE_OPTIONS = {"err_detect": "explode"}


@dataclass(frozen=True)
class RawLayout:
    """How a raw picture is laid out in its payload; constant over a camera's stream."""

    width: int
    height: int
    encoding: str  # the message's pixel encoding, lower case ("rgb8", "bayer_rggb8"...)
    step: int  # bytes per row, padding included
    big_endian: bool = False


@dataclass(frozen=True)
class FramePayload:
    """One camera message's picture, out of its envelope.

    ``format``: a video format (``h264``, ``h265``), a still-image format (``jpeg``, ``png``) or, for raw
    pictures, the pixel encoding (``rgb8``...). ``declared``: the format text as the message wrote it.
    """

    format: str
    data: bytes
    declared: str = ""
    raw: RawLayout | None = None


def _bytes(value: Any) -> bytes | None:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):  # JSON encodings of Foxglove's schemas carry bytes as base64
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            return None
    if isinstance(value, list):  # a JSON array of byte values
        try:
            return bytes(value)
        except (TypeError, ValueError):
            return None
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_payload(family: CameraFamily, decoded: Any, *, frame: int, what: str) -> FramePayload:
    """The picture in one decoded camera message of ``family`` (``frame``: its index on the topic).

    Raises :class:`MessageFamilyError`: ``unsupported_encoding`` for a format or pixel encoding we cannot
    decode, ``decode_error`` for a payload that is missing or does not fill its declared layout (a raw
    picture's ``step`` shorter than a row, or data shorter than ``step`` x ``height``).
    """
    data = _bytes(value_at(decoded, family.data_field))
    if data is None:
        raise MessageFamilyError(
            ReasonCode.DECODE_ERROR, f"{what}: frame {frame} has no {family.data_field} bytes", frame=frame
        )
    if family.kind is FrameKind.RAW:
        return _raw_payload(family, decoded, data, frame=frame, what=what)
    declared = str(value_at(decoded, family.format_field or "format", ""))
    parse = video_format if family.kind is FrameKind.VIDEO else image_format
    fmt = parse(declared)
    if fmt is None:
        allowed = sorted(VIDEO_DECODERS if family.kind is FrameKind.VIDEO else IMAGE_DECODERS)
        raise MessageFamilyError(
            ReasonCode.UNSUPPORTED_ENCODING,
            f"{what}: frame {frame} has format {declared!r}; decodable: {', '.join(allowed)}",
            frame=frame,
        )
    return FramePayload(fmt, data, declared)


def _raw_payload(family: CameraFamily, decoded: Any, data: bytes, *, frame: int, what: str) -> FramePayload:
    width = _int(value_at(decoded, family.width_field or "width"))
    height = _int(value_at(decoded, family.height_field or "height"))
    step = _int(value_at(decoded, family.step_field or "step"))
    encoding = str(value_at(decoded, family.encoding_field or "encoding", "")).strip().lower()
    big = bool(value_at(decoded, family.bigendian_field, False)) if family.bigendian_field else False
    if not width or not height or width < 0 or height < 0 or step is None:
        raise MessageFamilyError(
            ReasonCode.DECODE_ERROR,
            f"{what}: frame {frame} is {width}x{height} with step {step}: not a picture",
            frame=frame,
        )
    layout = pixel_layout(encoding)
    if layout is None:
        raise MessageFamilyError(
            ReasonCode.UNSUPPORTED_ENCODING,
            f"{what}: frame {frame} has pixel encoding {encoding!r}; decodable: {', '.join(PIXEL_ENCODINGS)}",
            frame=frame,
        )
    row = width * layout.bytes_per_pixel
    if step < row:
        raise MessageFamilyError(
            ReasonCode.DECODE_ERROR,
            f"{what}: frame {frame}: step {step} bytes is shorter than a row of {width} {encoding} pixels "
            f"({row} bytes)",
            frame=frame,
        )
    if len(data) < step * (height - 1) + row:
        raise MessageFamilyError(
            ReasonCode.DECODE_ERROR,
            f"{what}: frame {frame}: {len(data)} bytes of data for {height} rows of step {step} "
            f"({step * height} bytes)",
            frame=frame,
            offset=len(data),
        )
    return FramePayload(encoding, data, encoding, RawLayout(width, height, encoding, step, big))


def _decoder_options(kind: FrameKind) -> dict[str, str]:
    return dict(STRICT_IMAGE_OPTIONS) if kind is FrameKind.IMAGE else {}


class FrameDecoder:
    """Decodes one camera's payloads in order into ``av.VideoFrame`` s (``pts`` = the message's index).

    Video access units go through one decoder context (frames may come out later than their unit);
    still images give one frame each and are checked for structure first; raw pictures are copied into a
    frame of their pixel format, row padding dropped. A payload whose format differs from the stream's
    first raises ``unsupported_encoding`` (a camera is one stream).
    """

    def __init__(self, kind: FrameKind, fmt: str, *, what: str) -> None:
        self.kind = kind
        self.format = fmt
        self.what = what
        self._context: Any = None
        if kind is not FrameKind.RAW:
            self._context = self._new_context()

    def _new_context(self) -> Any:
        name = VIDEO_DECODERS[self.format] if self.kind is FrameKind.VIDEO else IMAGE_DECODERS[self.format]
        context = av.CodecContext.create(name, "r")
        # every core already runs a camera's encode: decoder threads would only compete
        context.thread_count = 1
        context.options = _decoder_options(self.kind)
        return context

    def decode(self, index: int, payload: FramePayload) -> list[av.VideoFrame]:
        """The frames that come out after ``payload`` (the message at ``index``)."""
        if payload.format != self.format:
            raise MessageFamilyError(
                ReasonCode.UNSUPPORTED_ENCODING,
                f"{self.what}: frame {index} is {payload.format}, the stream started as {self.format}",
                frame=index,
            )
        if self.kind is FrameKind.RAW:
            assert payload.raw is not None
            frame = raw_frame(payload.data, payload.raw)
            frame.pts = index
            return [frame]
        if self.kind is FrameKind.IMAGE:
            found = sniff_image(payload.data)
            if found != self.format:
                says = f"a {found} signature" if found else f"bytes {payload.data[:4].hex()}"
                raise MessageFamilyError(
                    ReasonCode.DECODE_ERROR,
                    f"{self.what}: frame {index} says {payload.declared!r} but starts with {says}",
                    frame=index,
                    offset=0,
                )
            check_image(self.what, index, self.format, payload.data)
        packet = av.Packet(payload.data)
        packet.pts = index
        if self.format == "png":
            # FFmpeg's PNG decoder keeps the previous picture (for APNG blending) and, reused, returns
            # the second and later PNGs of a stream damaged (13 dB against the pictures PIL decodes);
            # a context per picture costs microseconds, a PNG's inflate milliseconds.
            self._context = self._new_context()
        try:
            frames = list(self._context.decode(packet))
        except av.FFmpegError as exc:
            raise MessageFamilyError(
                ReasonCode.DECODE_ERROR, f"{self.what}: frame {index}: {exc}", frame=index
            ) from None
        if self.kind is FrameKind.IMAGE and not frames:
            raise MessageFamilyError(
                ReasonCode.DECODE_ERROR, f"{self.what}: frame {index} decodes to no picture", frame=index
            )
        return frames

    def flush(self) -> list[av.VideoFrame]:
        """The frames a video decoder still holds at the end of the stream."""
        if self.kind is not FrameKind.VIDEO:
            return []
        try:
            return list(self._context.decode(None))
        except av.FFmpegError as exc:
            raise MessageFamilyError(
                ReasonCode.DECODE_ERROR, f"{self.what}: at end of stream: {exc}"
            ) from None


def decode_payloads(
    kind: FrameKind, payloads: Iterator[FramePayload] | list[FramePayload], *, what: str
) -> Iterator[av.VideoFrame]:
    """Every frame of a stream of payloads, in decode order (``pts`` = the payload's index)."""
    decoder: FrameDecoder | None = None
    for index, payload in enumerate(payloads):
        if decoder is None:
            decoder = FrameDecoder(kind, payload.format, what=what)
        yield from decoder.decode(index, payload)
    if decoder is not None:
        yield from decoder.flush()


def raw_frame(data: bytes, layout: RawLayout) -> av.VideoFrame:
    """A PyAV frame of a raw picture: rows copied out of ``step``-byte lines into the frame's own lines."""
    pixel = pixel_layout(layout.encoding)
    assert pixel is not None  # read_payload refused the others
    fmt = pixel.pix_fmt_big_endian if layout.big_endian and pixel.pix_fmt_big_endian else pixel.pix_fmt
    frame = av.VideoFrame(layout.width, layout.height, fmt)
    plane = frame.planes[0]
    row = layout.width * pixel.bytes_per_pixel
    # step * (height - 1) + row bytes hold every row (the last row's padding may be absent)
    source = np.frombuffer(data, np.uint8, count=layout.step * (layout.height - 1) + row)
    rows = np.lib.stride_tricks.as_strided(source, (layout.height, row), (layout.step, 1))
    target = np.frombuffer(memoryview(plane), np.uint8).reshape(layout.height, plane.line_size)
    target[:, :row] = rows
    return frame


@dataclass(frozen=True)
class CameraFrames:
    """A camera's pictures in decode order, picklable for encoder processes.

    Compressed pictures (video access units, still images) are held in memory (a minute of three 720p
    JPEG cameras is about 800 MB), or, when the transcode handed them to its encoder processes while it
    read the log, in the ``spool`` file they went through (:mod:`pipeline.families.spool`; readable while
    the transcode runs). Raw pictures are not held (a minute of one 720p rgb8 camera is 5 GB):
    ``streamed_from`` names the file and topic they are read from again, one at a time, by whoever decodes
    them; they come in the order the source reader saw them (log-time order).
    """

    kind: FrameKind
    format: str
    count: int
    payloads: tuple[FramePayload, ...] = ()
    streamed_from: tuple[str, str] | None = None  # (MCAP path, topic) of a raw camera
    spool: str | None = None  # a finished picture spool

    def __iter__(self) -> Iterator[FramePayload]:
        if self.spool is not None:
            from pipeline.families.spool import read_spool

            yield from read_spool(self.spool)
            return
        if self.streamed_from is None:
            yield from self.payloads
            return
        path, topic = self.streamed_from
        yield from stream_payloads(path, topic)

    def decode(self, *, what: str) -> Iterator[av.VideoFrame]:
        """Every picture as a frame, ``pts`` = its index in decode order."""
        return decode_payloads(self.kind, iter(self), what=what)

    @property
    def size_bytes(self) -> int:
        """Bytes of the compressed payloads held (0 for a streamed raw camera or a spooled one)."""
        return sum(len(p.data) for p in self.payloads)


def stream_payloads(path: str, topic: str) -> Iterator[FramePayload]:
    """The pictures of a camera topic, read from the MCAP file in log-time order (as the source reader
    reads them), one message at a time."""
    from pipeline.families.table import camera_family
    from pipeline.mcaplog.decode import decoder_for
    from pipeline.mcaplog.messages import iter_messages

    family = decoder = None
    for index, (schema, channel, message) in enumerate(iter_messages(path, [topic])):
        if decoder is None:
            family = camera_family(schema.name if schema is not None else None)
            decoder = decoder_for(schema, channel.message_encoding)
            if family is None or decoder is None:
                raise MessageFamilyError(
                    ReasonCode.UNSUPPORTED_ENCODING, f"{topic}: not a camera type this reader decodes"
                )
        assert family is not None
        yield read_payload(family, decoder(message.data), frame=index, what=topic)
