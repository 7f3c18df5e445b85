"""Re-encode one camera: decode the source's pictures (any family of :mod:`pipeline.families`: video access
units, still images, raw pixels), scale, encode per profile.

:func:`encode_camera` is a plain function of picklable values so that cameras can be encoded in separate
processes (the step's ``resources.cpus`` sets how many); the bytes it returns depend only on its input.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar, cast

import av
from av.video.codeccontext import VideoCodecContext
from av.video.reformatter import ColorRange, Colorspace

from pipeline.enums import ReasonCode
from pipeline.families import CameraFrames, MessageFamilyError
from pipeline.families.spool import SpooledFrames
from pipeline.media.x264 import X264_THREADS
from pipeline.transcode.bitstream import unit_letter
from pipeline.transcode.errors import TranscodeInputError
from pipeline.transcode.profiles import EncoderSettings, fit_size

log = logging.getLogger(__name__)

_In = TypeVar("_In")
_Out = TypeVar("_Out")

#: Decoded frames held between the decode thread and the encoder: enough to ride out a slow frame on
#: either side, small enough to bound memory (8 yuv420p frames at 720p are ~11 MB).
PREFETCH_FRAMES = 8

#: Scaler used when a camera is larger than max_pixels: area averaging does not alias on downscale.
SCALE_INTERPOLATION = "AREA"


@dataclass(frozen=True)
class CameraJob:
    """One camera's source pictures (decode order) and how to re-encode them.

    ``frames``: the pictures, held or streamed (:class:`~pipeline.families.CameraFrames`), or coming
    through a spool while the source is read (:class:`~pipeline.families.spool.SpooledFrames`).
    ``prefetch``: decode in a thread of its own ahead of the encoder (see :func:`prefetched`); worth it only
    when a core would otherwise idle (:func:`prefetch_pays`).
    """

    name: str
    frames: CameraFrames | SpooledFrames
    rate: Fraction
    settings: EncoderSettings
    prefetch: bool = False


@dataclass(frozen=True)
class EncodedUnit:
    """One output access unit; ``source_index`` is the index of the source access unit its picture came
    from (so the source's stamp of that unit is the frame's stamp)."""

    display_index: int  # presentation position in the output stream
    source_index: int
    data: bytes
    letter: str  # frame letter, see pipeline.transcode.h264.frame_letter (both codecs)


@dataclass(frozen=True)
class EncodedCamera:
    name: str
    width: int
    height: int
    source_width: int
    source_height: int
    units: tuple[EncodedUnit, ...]  # decode order
    decoded_frames: int


def decode_units(units: Sequence[bytes], *, what: str, decoder_name: str = "h264") -> Iterator[av.VideoFrame]:
    """Decode Annex B access units in order (FFmpeg decoder ``decoder_name``: ``h264`` or ``hevc``); each
    frame's ``pts`` is the index of the unit it came from.

    A unit the decoder refuses raises :class:`TranscodeInputError` (``decode_error``).
    """
    decoder = cast(VideoCodecContext, av.CodecContext.create(decoder_name, "r"))
    decoder.thread_count = 1  # every core already runs a camera's encode: decoder threads would only compete
    for index, data in enumerate(units):
        packet = av.Packet(data)
        packet.pts = index
        try:
            yield from decoder.decode(packet)
        except av.FFmpegError as exc:
            raise TranscodeInputError(
                ReasonCode.DECODE_ERROR, f"{what}: access unit {index}: {exc}"
            ) from None
    try:
        yield from decoder.decode(None)
    except av.FFmpegError as exc:
        raise TranscodeInputError(ReasonCode.DECODE_ERROR, f"{what}: at end of stream: {exc}") from None


def prefetched(items: Iterable[av.VideoFrame], depth: int = PREFETCH_FRAMES) -> Iterator[av.VideoFrame]:
    """Yield ``items`` in order while a background thread produces the next ones (at most ``depth``
    ahead); an exception raised by the producer is raised here, at the item where it occurred.

    PyAV releases the GIL inside libavcodec, so decoding in the thread overlaps the encoder: on a core
    left idle (one camera on a two-process pool) the decode comes for free. On cores that every camera's
    encoder already keeps busy it costs: three 720p JPEG cameras dealt over two processes took about 15%
    more CPU with a decode thread per camera than decoding in line (``sluice bench transcode --source
    jpeg``: ``cpu_ratio_vs_decode_encode`` 0.83 with the threads, 0.96 without),
    so :func:`encode_camera` uses it only when the job asks (:func:`prefetch_pays`).
    """
    box: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(message: tuple[str, object]) -> bool:
        """Queue ``message`` unless the consumer has gone (then give up: nobody will read it)."""
        while not stop.is_set():
            try:
                box.put(message, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(("item", item)):
                    return
            offer(("end", None))
        except BaseException as exc:  # handed to the consumer, raised there
            offer(("error", exc))

    thread = threading.Thread(target=produce, name="decode-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = box.get()
            if kind == "end":
                return
            if kind == "error":
                assert isinstance(value, BaseException)
                raise value
            yield cast(av.VideoFrame, value)
    finally:
        stop.set()
        thread.join()


def make_encoder(width: int, height: int, rate: Fraction, settings: EncoderSettings) -> VideoCodecContext:
    """A libx264 or libx265 encoder configured by ``settings`` (raw Annex B out: parameter sets repeated
    before each keyframe)."""
    encoder = cast(VideoCodecContext, av.CodecContext.create(settings.encoder_name, "w"))
    encoder.width = width
    encoder.height = height
    encoder.pix_fmt = "yuv420p"
    encoder.time_base = 1 / rate
    encoder.framerate = rate
    encoder.thread_count = X264_THREADS
    encoder.options = settings.encoder_options()
    return encoder


#: Colour matrices (AVColorSpace -> swscale's name) a camera may name that its output keeps, and says
#: (:func:`tag_colour`): the ones swscale knows besides BT.601. None named, BT.601 and RGB or gray
#: pictures give BT.601, which readers take untagged video for; any other is refused (:class:`MatrixGuard`).
KEPT_MATRICES = {1: Colorspace.ITU709, 4: Colorspace.FCC, 7: Colorspace.SMPTE240M, 9: Colorspace.BT2020}

#: The matrix readers (FFmpeg, PyAV, lerobot) take a YUV picture's samples in, by its AVColorSpace tag:
#: untagged as BT.601, like both of BT.601's own tags.
MATRIX_NAMES = {
    0: "rgb",
    1: "bt709",
    2: "bt601",
    4: "fcc",
    5: "bt601",
    6: "bt601",
    7: "smpte240m",
    8: "ycgco",
    9: "bt2020nc",
    10: "bt2020c",
}
#: The matrices a YUV camera or video may be recorded in: BT.601 (or none named), which readers assume, and
#: the kept ones.
TRANSCODABLE_MATRICES = frozenset({"bt601", *(MATRIX_NAMES[k] for k in KEPT_MATRICES)})


def colour_matrix(frame: av.VideoFrame) -> str:
    """The matrix a reader takes ``frame``'s samples in (:data:`MATRIX_NAMES`); for a picture that has
    none (RGB: a PNG, a raw rgb8 or Bayer image; gray; a palette), the one it is converted to YUV with,
    BT.601 (:func:`encoder_picture`)."""
    fmt = frame.format
    if fmt.is_rgb or fmt.has_palette or len(fmt.components) < 3:
        return "bt601"
    space = int(frame.colorspace)
    return MATRIX_NAMES.get(space, f"matrix {space}")


#: Transfer characteristics (AVColorTransferCharacteristic) of HDR video: a reader that does not see them
#: shows the picture as SDR, washed out (HLG) or dark and flat (PQ).
HDR_TRANSFERS = {16: "pq", 18: "hlg"}


def colour_reading(frame: av.VideoFrame) -> str:
    """How a reader shows ``frame``'s samples, as the post-gates compare it: its matrix
    (:func:`colour_matrix`), followed by ``pq`` or ``hlg`` for HDR video."""
    hdr = HDR_TRANSFERS.get(int(frame.color_trc))
    return f"{colour_matrix(frame)} {hdr}" if hdr else colour_matrix(frame)


class MatrixGuard:
    """Refuses what the transcode cannot show in the source's colours: a first picture in a matrix it can
    neither keep nor convert (YCgCo, BT.2020 constant luminance, the reserved and chroma-derived tags,
    which swscale refuses: ``unsupported_encoding``), and a matrix that changes mid-stream
    (``colour_mismatch``), whose output, tagged once, would show part of the stream in other colours. Range
    changes are fine: every picture's range is converted.

    It follows the decoder's tags: FFmpeg's H.264 decoder keeps a matrix when a later SPS names none (so a
    BT.709 camera spliced with an untagged one is taken as BT.709 throughout), its HEVC decoder does not
    (the same splice is refused)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.first = ""
        self.pictures = 0

    def check(self, frame: av.VideoFrame) -> None:
        matrix = colour_matrix(frame)
        if self.pictures == 0:
            self.first = matrix
            if matrix not in TRANSCODABLE_MATRICES:
                raise TranscodeInputError(
                    ReasonCode.UNSUPPORTED_ENCODING,
                    f"{self.what}: its pictures name the colour matrix {matrix}, which the transcode can "
                    f"neither keep nor convert (it keeps {', '.join(sorted(TRANSCODABLE_MATRICES))})",
                )
        elif matrix != self.first:
            raise TranscodeInputError(
                ReasonCode.COLOUR_MISMATCH,
                f"{self.what}: picture {self.pictures} names the colour matrix {matrix}, the stream began in "
                f"{self.first}; a matrix change mid-stream is not supported",
            )
        self.pictures += 1


def tag_colour(encoder: VideoCodecContext, frame: av.VideoFrame) -> None:
    """Say in the output (the H.264/H.265 VUI) the matrix, primaries and transfer of a camera that names a
    kept matrix (a BT.709 HD camera): its YUV values are kept, and untagged they would be read as BT.601,
    shifting the colours (a saturated BT.709 red by up to 39 levels). The range is limited either way
    (:func:`encoder_picture`). Set before the encoder's first picture: the VUI is in its parameter sets."""
    if frame.colorspace not in KEPT_MATRICES:
        return
    encoder.colorspace = frame.colorspace
    encoder.color_primaries = frame.color_primaries
    encoder.color_trc = frame.color_trc
    encoder.color_range = ColorRange.MPEG


def encoder_picture(frame: av.VideoFrame, width: int, height: int) -> av.VideoFrame:
    """``frame`` as the encoder takes it: ``width`` x ``height``, limited-range yuv420p.

    The range is asked for, not left to swscale: given a full-range source (a JPEG's yuvj420p, or a PNG
    decoder's RGB, which FFmpeg tags full range) it otherwise writes full-range samples into a frame the
    encoder labels limited range, and every player stretches the contrast (measured: mean luma error 8.7
    levels instead of 1.1 on the synthetic scene).
    """
    if (
        (frame.width, frame.height) == (width, height)
        and frame.format.name == "yuv420p"
        and frame.color_range != ColorRange.JPEG
    ):
        return frame  # nothing to convert: skip the copy
    return frame.reformat(
        width=width,
        height=height,
        format="yuv420p",
        interpolation=SCALE_INTERPOLATION,
        # and the matrix named: a PNG decoder tags its RGB frames with the RGB "colorspace", which a
        # reformat otherwise copies onto the yuv420p frame; BT.601 is what swscale converts RGB with. A
        # kept matrix (BT.709) stays: swscale's own conversion between YUV matrices shifts luma by about
        # two levels, and the output says the matrix instead (tag_colour)
        dst_colorspace=KEPT_MATRICES.get(frame.colorspace, Colorspace.ITU601),
        dst_color_range=ColorRange.MPEG,
    )


def timestamp(item: av.Packet | av.VideoFrame) -> int:
    """The pts of a packet or frame we stamped ourselves (always set)."""
    if item.pts is None:
        raise ValueError(f"{type(item).__name__} without a timestamp")
    return int(item.pts)


def _wrap(packets: Sequence[av.Packet], source_of: Sequence[int], codec: str) -> list[EncodedUnit]:
    out = []
    for packet in packets:
        data = bytes(packet)
        pts = timestamp(packet)
        out.append(EncodedUnit(pts, source_of[pts], data, unit_letter(codec, data)))
    return out


def _decoded(job: CameraJob) -> Iterator[av.VideoFrame]:
    """The camera's pictures, a picture a message family refuses raised as the transcode's own error."""
    try:
        yield from job.frames.decode(what=f"camera {job.name}")
    except MessageFamilyError as exc:
        raise TranscodeInputError(exc.code, exc.detail) from None


def encode_camera(job: CameraJob) -> EncodedCamera:
    """Decode, scale (to ``max_pixels``) and re-encode one camera's stream; output units in decode order."""
    encoder = None
    units: list[EncodedUnit] = []
    width = height = source_width = source_height = 0
    # Encoder timestamps are presentation ordinals (x264 wants them rising); this maps them back to the
    # source unit each frame came from (different when the source itself had B-frames).
    source_of: list[int] = []
    pictures = _decoded(job)
    matrices = MatrixGuard(f"camera {job.name}")
    for frame in prefetched(pictures) if job.prefetch else pictures:
        matrices.check(frame)
        if encoder is None:
            source_width, source_height = frame.width, frame.height
            width, height = fit_size(frame.width, frame.height, job.settings.max_pixels)
            encoder = make_encoder(width, height, job.rate, job.settings)
            tag_colour(encoder, frame)
        if (frame.width, frame.height) != (source_width, source_height):
            raise TranscodeInputError(
                ReasonCode.RESOLUTION_OUT_OF_BOUNDS,
                f"camera {job.name}: frame {frame.pts} is {frame.width}x{frame.height}, the stream started "
                f"at {source_width}x{source_height}; a size change mid-stream is not supported",
            )
        out = encoder_picture(frame, width, height)
        source_of.append(timestamp(frame))
        out.pts = len(source_of) - 1
        out.time_base = encoder.time_base
        out.pict_type = av.video.frame.PictureType.NONE  # let x264 choose: the GOP comes from its params
        units += _wrap(encoder.encode(out), source_of, job.settings.codec)
    if encoder is None:
        raise TranscodeInputError(ReasonCode.TOO_FEW_FRAMES, f"camera {job.name}: no frame decodes")
    units += _wrap(encoder.encode(None), source_of, job.settings.codec)
    log.debug("camera %s: %d frames decoded, %d units out", job.name, len(source_of), len(units))
    return EncodedCamera(
        name=job.name,
        width=width,
        height=height,
        source_width=source_width,
        source_height=source_height,
        units=tuple(units),
        decoded_frames=len(source_of),
    )


def prefetch_pays(cameras: int, cores: int) -> bool:
    """Whether decoding ahead in a thread of its own pays: only while fewer cameras encode at once than
    there are cores for them, so that the decode thread runs on a core no encoder uses."""
    return cameras < cores


def run_concurrently(fn: Callable[[_In], _Out], items: Sequence[_In]) -> list[_Out]:
    """``[fn(item) for item in items]`` with every item in its own thread (results in order; the first
    exception is raised after all threads ended).

    For codec work: PyAV releases the GIL inside libavcodec and libx264, so the threads run on separate
    cores, and the operating system shares the cores among all of them. Each encoder stays single-threaded
    (its bytes do not depend on the machine); only when they run changes.
    """
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(len(items), thread_name_prefix="camera") as threads:
        return list(threads.map(fn, items))


def encode_cameras(jobs: Sequence[CameraJob]) -> list[EncodedCamera]:
    """:func:`encode_camera` for several cameras at once, one thread each (see :func:`run_concurrently`);
    the output of each camera is the same as encoding it alone."""
    return run_concurrently(encode_camera, jobs)


def deal(items: Sequence[_In], hands: int) -> list[list[_In]]:
    """``items`` dealt round-robin into at most ``hands`` non-empty lists (cameras over encoder processes:
    three cameras on two processes become [[a, c], [b]])."""
    hands = max(1, min(hands, len(items)))
    return [list(items[k::hands]) for k in range(hands)]
