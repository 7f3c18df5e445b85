"""Thumbnails for the report's contact sheet: one frame of an episode, as a small JPEG ``data:`` URI.

Where the frame comes from:

* an accepted robot episode: its transcoded episode, through the sample reader (indexed: only the GOP of
  the frame is read), at the episode's middle;
* a held-back robot log: the raw file, read front to back with the stock ``mcap`` stream reader, which
  yields records until the damage (truncation, a bad chunk) stops it; the frame is the one on screen at the
  time a check failed, else at the middle, else the last one that decoded before the damage;
* a clip (raw MP4, accepted or not): PyAV, seeking near the time asked for, and the last good frame when
  the bitstream is corrupt.

Decoding, scaling and JPEG encoding are all PyAV's (FFmpeg's decoders, swscale, the mjpeg encoder). Every
failure is a :class:`Thumbnail` without an image and with the reason, never an exception: a report about
broken inputs must not break on them.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import av

    from pipeline.families import FrameKind, FramePayload

log = logging.getLogger(__name__)

#: Thumbnail width in pixels (height keeps the aspect ratio): eight fit across a report page.
THUMB_WIDTH_PX = 192
#: mjpeg's quantiser scale: 2 (best) .. 31; 5 keeps a 192 px frame near 6 kB.
JPEG_QSCALE = 5
#: Access units of one camera decoded at most for a raw robot log: a long log without keyframes near the
#: time asked for must not decode for minutes (about 100 s at 30 Hz).
MAX_DECODED_UNITS = 3_000
#: Frames decoded at most after a seek in a clip (a GOP is 1-10 s; 600 frames is 20 s at 30 fps).
MAX_CLIP_FRAMES = 600
#: Still images or raw pictures of a camera kept while a raw robot log is read: the newest that decodes is
#: shown (a broken one among them is passed over).
MAX_STILL_PICTURES = 8
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Thumbnail:
    """A frame (``data_uri`` JPEG) or why there is none (``note``); ``at_s`` is its time in the episode."""

    data_uri: str | None
    at_s: float | None
    note: str
    width: int = 0
    height: int = 0


def _jpeg(frame: av.VideoFrame, at_s: float | None, note: str) -> Thumbnail:
    import av

    width = THUMB_WIDTH_PX
    height = max(2, round(frame.height * width / max(1, frame.width) / 2) * 2)  # even, as yuvj420p needs
    small = frame.reformat(width=width, height=height, format="yuvj420p")
    encoder = av.CodecContext.create("mjpeg", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "yuvj420p"
    encoder.time_base = Fraction(1, 1)
    data = b"".join(bytes(p) for p in [*encoder.encode(small), *encoder.encode(None)])
    uri = "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
    return Thumbnail(uri, at_s, note, width, height)


def none(note: str) -> Thumbnail:
    return Thumbnail(None, None, note)


# -- robot logs ----------------------------------------------------------------------------------------------


def transcoded_frame(
    uri: str, camera: str | None, *, storage_options: dict[str, Any] | None = None
) -> Thumbnail:
    """The middle frame of ``camera`` (default: the first) in a transcoded episode."""
    import av

    from pipeline.reader import open_episode

    try:
        with open_episode(uri, storage_options=storage_options) as reader:
            name = camera if camera in reader.cameras else (reader.cameras[0] if reader.cameras else None)
            if name is None:
                return none("the transcoded episode has no camera")
            t_ns = (reader.start_ns + reader.end_ns) // 2
            sample = reader.sample(t_ns, frames_per_camera=1, topics=[], cameras=[name])
            image = sample.frames[name][0].image
            if image is None:
                return none("the transcoded frame did not decode")
    except (OSError, ValueError, av.FFmpegError) as exc:
        return none(f"no frame from the transcoded episode: {exc}")
    except Exception as exc:  # a reader error of the product's own tree (decode_error, index)
        from pipeline.errors import SluiceError

        if not isinstance(exc, SluiceError):
            raise
        return none(f"no frame from the transcoded episode: {exc}")
    return _jpeg(
        av.VideoFrame.from_ndarray(image, format="rgb24"),
        (t_ns - reader.start_ns) / NS_PER_S,
        f"{name}, middle of the episode",
    )


def raw_log_frame(
    handle: IO[bytes], camera: str | None, *, at_ns: int | None, start_ns: int | None, why: str | None
) -> Thumbnail:
    """The frame of ``camera`` (default: the topic of the first camera message, of a family
    :mod:`pipeline.families` knows) on screen at ``at_ns`` in a raw robot log, or the last one that decodes
    before the file's damage (see the module doc). Video needs the units from the latest random-access unit
    on (and the latest parameter sets, when that unit carries none); a still image or raw picture stands
    alone, so the latest few are kept, the newest that decodes shown (one can be the broken one)."""
    from pipeline.families import FrameDecoder, FrameKind, MessageFamilyError
    from pipeline.transcode.bitstream import unit_info

    payloads = _CameraPayloads(handle, camera)
    kept: list[tuple[int, int, FramePayload]] = []  # (index, log time, payload) the frame at the target needs
    parameters: tuple[int, int, FramePayload] | None = None  # the latest video unit with parameter sets
    first_ns: int | None = None
    for index, (log_time, payload) in enumerate(payloads):
        first_ns = log_time if first_ns is None else first_ns
        if at_ns is not None and log_time > at_ns and kept:
            break
        entry = (index, log_time, payload)
        if payloads.kind is FrameKind.VIDEO:
            try:
                info = unit_info(payload.format, payload.data)
            except ValueError:
                info = None
            if info is not None and info.random_access:
                kept = [parameters] if parameters is not None and not info.coders else []
            if info is not None and info.coders:
                parameters = entry
        kept.append(entry)
        limit = MAX_DECODED_UNITS if payloads.kind is FrameKind.VIDEO else MAX_STILL_PICTURES
        if len(kept) > limit:
            kept = kept[-limit:]
    stopped = payloads.stopped
    topic, kind = payloads.topic, payloads.kind
    if (topic is None or kind is None) and not stopped:
        return none("no camera in this log" + (f" named {camera}" if camera else ""))
    if topic is None or kind is None or not kept:
        return none("no camera frame could be read" + (f" ({stopped})" if stopped else ""))
    last: tuple[int, av.VideoFrame] | None = None
    if kind is FrameKind.VIDEO:
        times = {index: log_time for index, log_time, _ in kept}  # frames come out by pts = unit index
        decoder = FrameDecoder(kind, kept[0][2].format, what=topic)
        ends: list[tuple[int, int, FramePayload | None]] = [*kept, (-1, 0, None)]  # None: flush
        for index, _, unit in ends:
            try:
                frames = decoder.decode(index, unit) if unit is not None else decoder.flush()
            except MessageFamilyError:
                continue
            for frame in frames:
                if frame.pts in times:
                    last = (times[frame.pts], frame)
    else:
        for index, log_time, payload in reversed(kept):  # the newest picture that decodes
            try:
                frames = FrameDecoder(kind, payload.format, what=topic).decode(index, payload)
            except MessageFamilyError:
                continue
            last = (log_time, frames[-1])
            break
    if last is None:
        return none(
            f"{topic}: no frame decodes from the last keyframe on"
            if kind is FrameKind.VIDEO
            else f"{topic}: none of the last {len(kept)} pictures decodes"
        )
    origin = start_ns if start_ns is not None else first_ns
    at_s = (last[0] - origin) / NS_PER_S if origin is not None else None
    if at_ns is not None and why:
        note = f"{topic}, where {why}"
    elif stopped:
        note = f"{topic}, last frame before the damage ({stopped})"
    else:
        note = f"{topic}, middle of the episode" if at_ns is not None else f"{topic}, last frame"
    return _jpeg(last[1], at_s, note)


class _CameraPayloads:
    """``(log_time, picture)`` of one camera's messages in file order (any camera family: video units,
    still images, raw pictures), until the end or the first record the stock stream reader refuses (then
    :attr:`stopped` says why). A message whose picture cannot be taken out of it is passed over."""

    def __init__(self, handle: IO[bytes], camera: str | None) -> None:
        self.handle = handle
        self.camera = camera
        self.stopped = ""
        self.topic: str | None = None
        self.kind: FrameKind | None = None

    def __iter__(self) -> Iterator[tuple[int, FramePayload]]:
        from mcap.records import Channel, Message, Schema
        from mcap.stream_reader import StreamReader

        from pipeline.families import camera_family, read_payload

        schemas: dict[int, Schema] = {}
        channels: dict[int, Channel] = {}
        chosen: int | None = None
        family = decode = None
        count = 0
        try:
            for record in StreamReader(self.handle, validate_crcs=True).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record
                elif isinstance(record, Channel):
                    channels[record.id] = record
                elif isinstance(record, Message) and record.channel_id in channels:
                    channel = channels[record.channel_id]
                    if chosen is None and (self.camera is None or channel.topic == self.camera):
                        schema = schemas.get(channel.schema_id)
                        family = camera_family(schema.name if schema is not None else None)
                        decode = _decoder(schema, channel) if family is not None else None
                        if family is not None and decode is not None:
                            chosen, self.topic, self.kind = channel.id, channel.topic, family.kind
                    if record.channel_id != chosen or family is None or decode is None:
                        continue
                    count += 1
                    try:
                        payload = read_payload(
                            family, decode(record.data), frame=count - 1, what=channel.topic
                        )
                    except Exception:  # a message that does not decode, or holds no picture: passed over
                        continue
                    yield record.log_time, payload
        except Exception as exc:  # the stock reader's errors share no base class: any of them ends the read
            self.stopped = f"{type(exc).__name__}: {exc}"[:200]


def _decoder(schema: Any, channel: Any) -> Any:
    """The channel's payload decoder, or None (an encoding we have none for, a schema that does not load:
    the channel is not a camera this sheet can show, not damage that ends the read)."""
    from pipeline.mcaplog.decode import decoder_for

    try:
        return decoder_for(schema, channel.message_encoding)
    except Exception:  # protobuf and ROS 2 schema parsers raise their own types
        return None


# -- clips ---------------------------------------------------------------------------------------------------


def clip_frame(source: str | IO[bytes], *, at_s: float | None, why: str | None) -> Thumbnail:
    """The frame of a clip (a path or an open file) at ``at_s`` (default: its middle), or the last good one
    before corrupt data."""
    import av

    try:
        container = av.open(source, mode="r")
    except (OSError, av.FFmpegError) as exc:
        return none(f"the file does not open as video: {exc}")
    with container:
        if not container.streams.video:
            return none("the file has no video stream")
        stream = container.streams.video[0]
        duration_s = (
            float(stream.duration * stream.time_base) if stream.duration and stream.time_base else None
        )
        target = at_s if at_s is not None else (duration_s / 2 if duration_s else 0.0)
        if target > 2.0 and stream.time_base:
            try:
                container.seek(int(target / stream.time_base), stream=stream, backward=True)
            except av.FFmpegError:
                container.seek(0, stream=stream)
        last: av.VideoFrame | None = None
        broken = ""
        count = 0
        try:
            for frame in container.decode(stream):
                last = frame
                count += 1
                if (frame.time is not None and frame.time >= target) or count >= MAX_CLIP_FRAMES:
                    break
        except av.FFmpegError as exc:
            broken = str(exc)[:160]
    if last is None:
        return none("no frame decodes" + (f" ({broken})" if broken else ""))
    if broken:
        note = f"last good frame before the corrupt data ({broken})"
    elif why:
        note = why
    else:
        note = "middle of the clip"
    return _jpeg(last, last.time, note)
