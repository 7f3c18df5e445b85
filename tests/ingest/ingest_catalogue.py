"""The catalogue of bad inputs: how each is made and the one state (and reason codes) it must end in.

Robot logs are made from one clean synthetic episode; every readable variant moves its log times by a
different number of nanoseconds (``shift_ns``) so that only the near-duplicate case is a near-duplicate.
Crafted robot files live under ``zz/`` so that the vendor's clean episodes are ingested (and accepted)
before them: schema drift and near-duplicates are judged against earlier episodes.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from ingest_helpers import (
    Expected,
    copy_bytes,
    first_log_time,
    json_stamp_shift,
    keep_until,
    patch,
    repeat_log_times,
    rewrite,
)

from pipeline.enums import FileState, ReasonCode
from pipeline.synth.mutate import chunk_spans, cut_points, scan_records

F, R = FileState, ReasonCode
OK = Expected.of(F.ACCEPTED)
Q = lambda *r: Expected.of(F.QUARANTINED, *r)  # noqa: E731
FLAG = lambda *r: Expected.of(F.ACCEPTED_WITH_FLAGS, *r)  # noqa: E731

RobotMaker = Callable[[Path, Path], object]  # (clean episode, destination) -> anything


def _cut(point: str) -> RobotMaker:
    def make(clean: Path, dst: Path) -> None:
        copy_bytes(clean, dst, clean.read_bytes()[: cut_points(clean)[point]])

    return make


def _flip_chunk_payload(compression: str) -> RobotMaker:
    def make(clean: Path, dst: Path) -> None:
        rewrite(
            clean,
            dst,
            compression=compression,
            chunk_size=16 << 10,
            shift_ns=11 if compression == "none" else 12,
        )
        chunk = chunk_spans(dst)[1]
        data = bytearray(dst.read_bytes())
        data[chunk.offset + chunk.length // 2] ^= 0x01
        dst.write_bytes(bytes(data))

    return make


def _flip_unchunked_message(clean: Path, dst: Path) -> None:
    rewrite(clean, dst, chunked=False, data_crcs=True, shift_ns=13)
    messages = [s for s in scan_records(dst) if s.opcode == 0x05]
    middle = messages[len(messages) // 2]
    data = bytearray(dst.read_bytes())
    data[middle.end - 3] ^= 0x10  # a payload byte: only the data-section CRC can catch it
    dst.write_bytes(bytes(data))


def _flip_summary(clean: Path, dst: Path) -> None:
    copy_bytes(clean, dst)
    index = next(s for s in scan_records(dst) if s.opcode == 0x08)  # the first chunk index
    data = bytearray(dst.read_bytes())
    data[index.offset + 12] ^= 0x01
    dst.write_bytes(bytes(data))


def _unknown_compression(clean: Path, dst: Path) -> None:
    """Every chunk says 'brot'; the summary (and its CRC) still says zstd."""
    copy_bytes(clean, dst)
    for chunk in chunk_spans(dst):
        at = chunk.offset + 9 + 3 * 8 + 4  # header, start/end times, uncompressed size, crc
        assert dst.read_bytes()[at : at + 8] == b"\x04\x00\x00\x00zstd"
        patch(dst, at + 4, b"brot")


def _absurd_length(which: str) -> RobotMaker:
    def make(clean: Path, dst: Path) -> None:
        copy_bytes(clean, dst)
        spans = scan_records(dst)
        record = spans[0] if which == "header" else chunk_spans(dst)[0]
        patch(dst, record.offset + 1, struct.pack("<Q", 1 << 60))

    return make


def _metadata(**values: str) -> RobotMaker:
    def make(clean: Path, dst: Path) -> None:
        from mcap.reader import make_reader

        with open(clean, "rb") as fh:
            episode = next(m for m in make_reader(fh).iter_metadata() if m.name == "episode")
        merged = {**episode.metadata, **values}
        rewrite(clean, dst, metadata={"episode": {k: v for k, v in merged.items() if v}}, shift_ns=14)

    return make


def _too_short(clean: Path, dst: Path) -> None:
    rewrite(clean, dst, message_fn=keep_until(first_log_time(clean) + 500_000_000), shift_ns=15)


def _clock_step(delta_ns: int) -> RobotMaker:
    """Every message logged after the middle of the episode moves by ``delta_ns`` (an NTP step)."""

    def make(clean: Path, dst: Path) -> None:
        middle = first_log_time(clean) + 750_000_000

        def step(topic: str, log_time: int, data: bytes) -> tuple[int, bytes]:
            return (log_time + delta_ns if log_time >= middle else log_time), data

        rewrite(clean, dst, message_fn=step, shift_ns=17 + (delta_ns < 0))

    return make


def _schema_drift(clean: Path, dst: Path) -> None:
    from pipeline.synth import layout

    schema = {
        **layout.JOINT_STATE_JSON_SCHEMA,
        "properties": {**layout.JOINT_STATE_JSON_SCHEMA["properties"]},
    }
    schema["properties"]["torque_limit"] = {"type": "number"}  # a firmware update added a field
    data = json.dumps(schema, sort_keys=True).encode()
    rewrite(clean, dst, schemas={layout.JOINT_STATE_SCHEMA_NAME: data}, shift_ns=16)


def _near_duplicate(clean: Path, dst: Path) -> None:
    rewrite(clean, dst, chunk_size=16 << 10, compression="lz4")  # same messages, other chunks


ODD_NAMES = (
    "names/épisode-ünïcødé-録画.mcap",
    "names/line\nbreak.mcap",
    "names/-rf --no-preserve-root.mcap",
    "names/ leading and trailing spaces .mcap",
    os.fsdecode(b"names/latin1-\xe9t\xe9.mcap"),  # not UTF-8: a surrogate-escaped name on Linux
)

#: Crafted robot logs: relative path -> (maker, expected outcome).
ROBOT_CASES: dict[str, tuple[RobotMaker, Expected]] = {
    **{
        f"zz/cut/{p}.mcap": (_cut(p), Q(R.TRUNCATED))
        for p in (
            "after_magic",
            "after_header",
            "mid_chunk",
            "record_boundary",
            "before_footer",
            "before_trailing_magic",
        )
    },
    "zz/crc/chunk_payload_flip_uncompressed.mcap": (_flip_chunk_payload("none"), Q(R.CRC_MISMATCH)),
    "zz/crc/chunk_payload_flip_zstd.mcap": (_flip_chunk_payload("zstd"), Q(R.CRC_MISMATCH)),
    "zz/crc/data_section_unchunked.mcap": (_flip_unchunked_message, Q(R.CRC_MISMATCH)),
    "zz/crc/summary_flip.mcap": (_flip_summary, Q(R.CRC_MISMATCH)),
    "zz/crc/absent_chunked.mcap": (lambda c, d: rewrite(c, d, crcs=False, shift_ns=1), FLAG(R.CRC_ABSENT)),
    "zz/crc/absent_unchunked.mcap": (
        lambda c, d: rewrite(c, d, chunked=False, data_crcs=False, shift_ns=2),
        FLAG(R.CRC_ABSENT),
    ),
    "zz/structure/unknown_compression.mcap": (_unknown_compression, Q(R.UNKNOWN_COMPRESSION)),
    "zz/structure/absurd_header_length.mcap": (_absurd_length("header"), Q(R.RECORD_TOO_LARGE)),
    # the summary's chunk index then disagrees with the chunk: both are reported
    "zz/structure/absurd_chunk_length.mcap": (
        _absurd_length("chunk"),
        Q(R.RECORD_TOO_LARGE, R.CONTAINER_ERROR),
    ),
    "zz/structure/png_named_mcap.mcap": (
        lambda c, d: copy_bytes(c, d, b"\x89PNG\r\n\x1a\n" + bytes(120)),
        Q(R.BAD_MAGIC),
    ),
    "zz/structure/text_named_mcap.mcap": (lambda c, d: copy_bytes(c, d, b"hello, robot\n"), Q(R.BAD_MAGIC)),
    "zz/content/duplicate_log_times.mcap": (
        lambda c, d: rewrite(c, d, message_fn=repeat_log_times("/robot/joint_states", 50), shift_ns=3),
        FLAG(R.DUPLICATE_TIMESTAMPS),
    ),
    "zz/content/clock_skew.mcap": (
        lambda c, d: rewrite(c, d, message_fn=json_stamp_shift("/robot/action", -200_000_000), shift_ns=4),
        FLAG(R.CLOCK_SKEW),
    ),
    "zz/content/no_calibration.mcap": (_metadata(robot_id="rb77"), FLAG(R.NO_CALIBRATION)),
    "zz/content/missing_metadata.mcap": (
        lambda c, d: rewrite(c, d, metadata={}, shift_ns=5),
        Q(R.MISSING_METADATA),
    ),
    # No 'episode' record, as rosbag2 writes none: the vendor's episode_metadata.path_pattern (set for
    # zz/from_path/ only) gives the robot and session from the folders; rb77 has no calibration.
    "zz/from_path/rb77/s9/no_record.mcap": (
        lambda c, d: rewrite(c, d, metadata={}, shift_ns=15),
        FLAG(R.NO_CALIBRATION),
    ),
    "zz/content/too_short.mcap": (_too_short, Q(R.DURATION_OUT_OF_BOUNDS, R.TOO_FEW_FRAMES)),
    "zz/content/action_as_cbor.mcap": (
        lambda c, d: rewrite(c, d, encodings={"/robot/action": "cbor"}, shift_ns=6),
        Q(R.UNSUPPORTED_ENCODING),
    ),
    "zz/content/schema_drift.mcap": (_schema_drift, FLAG(R.SCHEMA_DRIFT)),
    # three hours forward: neither a gap nor (at 3 h) an over-long episode, only the jump
    "zz/content/clock_jump_3h.mcap": (_clock_step(3 * 3600 * 10**9), Q(R.CLOCK_JUMP)),
    # an hour back: the log time also steps backwards (a flag, listed with the jump's check results)
    "zz/content/clock_jump_back.mcap": (_clock_step(-3600 * 10**9), Q(R.CLOCK_JUMP)),
    "zz/content/near_duplicate.mcap": (_near_duplicate, FLAG(R.NEAR_DUPLICATE)),
    **{name: (lambda c, d, k=k: rewrite(c, d, shift_ns=100 + k), OK) for k, name in enumerate(ODD_NAMES)},
}


# -- videos ------------------------------------------------------------------------------------------------

VideoMaker = Callable[[Path], object]  # destination -> anything


def write_video(
    path: Path,
    *,
    frames: int = 36,
    width: int = 128,
    height: int = 96,
    fps: int = 30,
    pts_ms: list[int] | None = None,
    bars_px: int = 0,
    codec: str = "libx264",
    container: str = "mp4",
    options: dict[str, str] | None = None,
    seed: int = 0,
    pix_fmt: str = "yuv420p",
    black: bool = False,
) -> Path:
    """Real H.264 (or ``codec``) of grainy frames (``black``: all black); ``bars_px`` black rows at the
    top and bottom."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format=container) as out:
        stream = out.add_stream(codec, rate=fps, options=options or {})
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        if pts_ms is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
            stream.time_base = Fraction(1, 1000)
        for index in range(frames):
            image = rng.integers(40, 255, (height, width, 3), dtype=np.uint8)
            if black:
                image[:] = 0
            if bars_px:
                image[:bars_px] = image[-bars_px:] = 0
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            if pts_ms is not None:
                frame.pts, frame.time_base = pts_ms[index], Fraction(1, 1000)
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return path


def _declared_size(width: int, height: int) -> VideoMaker:
    """A small real MJPEG ``.mov`` whose sample description and every frame's JPEG header (SOF0) declare
    ``width`` x ``height``, with 64x64 frames' worth of data behind them: a decoder would allocate the
    declared picture."""

    def make(dst: Path) -> Path:
        write_video(dst, width=64, height=64, frames=12, codec="mjpeg", container="mov", pix_fmt="yuvj420p")
        data = bytearray(dst.read_bytes())
        size = width.to_bytes(2, "big") + height.to_bytes(2, "big")
        entry = data.index(b"jpeg", data.index(b"stsd"))  # the visual sample entry's type
        data[entry + 28 : entry + 32] = size
        sof = data.find(b"\xff\xc0")
        while sof != -1:  # SOF0: marker, length (2), precision (1), height (2), width (2)
            data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
            sof = data.find(b"\xff\xc0", sof + 9)
        dst.write_bytes(bytes(data))
        return dst

    return make


def _remux(src: Path, dst: Path, *, shift_frames: int = 0, faststart: bool = False) -> None:
    """Copy ``src``'s video packets into ``dst``; ``shift_frames`` moves every timestamp earlier, so an
    edit list hides the first frames (the first shown frame is then not a keyframe)."""
    options = {"movflags": "+faststart"} if faststart else {}
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4", options=options) as out:
        source = inp.streams.video[0]
        stream = out.add_stream_from_template(source)
        delta = int(shift_frames / (source.average_rate * source.time_base))
        for packet in inp.demux(source):
            if packet.dts is None:
                continue
            packet.pts -= delta
            packet.dts -= delta
            packet.stream = stream
            out.mux(packet)


def _no_leading_keyframe(dst: Path) -> None:
    tmp = write_video(
        dst.with_suffix(".src.tmp"), frames=40, options={"x264-params": "bframes=2:keyint=30"}, seed=3
    )
    _remux(tmp, dst, shift_frames=2)
    tmp.unlink()


def _truncated(faststart: bool) -> VideoMaker:
    def make(dst: Path) -> None:
        tmp = write_video(dst.with_suffix(".src.tmp"), seed=4 if faststart else 5)
        _remux(tmp, dst, faststart=faststart)
        tmp.unlink()
        data = dst.read_bytes()
        dst.write_bytes(data[: int(len(data) * 0.6)])

    return make


def _audio_only(dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    rate = 48_000
    with av.open(str(dst), "w", format="mp4") as out:
        stream = out.add_stream("aac", rate=rate)
        samples = (np.sin(np.arange(rate) * 2 * np.pi * 440 / rate) * 0.2).astype(np.float32)
        for start in range(0, rate, 1024):
            chunk = samples[start : start + 1024].reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout="mono")
            frame.sample_rate = rate
            frame.pts = start
            out.mux(stream.encode(frame))
        out.mux(stream.encode())


def _text(body: bytes) -> VideoMaker:
    def make(dst: Path) -> None:
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(body)

    return make


VFR_STEPS_MS = (33, 50, 21, 40, 33, 60, 25)
VFR_PTS = [sum(VFR_STEPS_MS[j % len(VFR_STEPS_MS)] for j in range(i)) for i in range(36)]

#: Crafted videos: relative path -> (maker, expected outcome).
VIDEO_CASES: dict[str, tuple[VideoMaker, Expected]] = {
    "crafted/vfr.mp4": (lambda d: write_video(d, pts_ms=VFR_PTS, seed=6), FLAG(R.VARIABLE_FRAME_RATE)),
    "crafted/letterboxed.mp4": (lambda d: write_video(d, bars_px=16, seed=7), FLAG(R.LETTERBOXED)),
    "crafted/no_leading_keyframe.mp4": (_no_leading_keyframe, FLAG(R.MISSING_LEADING_KEYFRAME)),
    "crafted/audio_only.mp4": (_audio_only, Q(R.NO_VIDEO_STREAM)),
    "crafted/truncated_moov_last.mp4": (_truncated(False), Q(R.CONTAINER_ERROR)),
    # cut inside a sample: the last packet read is partial too
    "crafted/truncated_faststart.mp4": (_truncated(True), Q(R.TRUNCATED, R.DECODE_ERROR)),
    "crafted/random_bytes.mp4": (_text(np.random.default_rng(8).bytes(4096)), Q(R.DISALLOWED_CONTAINER)),
    # Playlists pointing outside the vendor root: refused from their first bytes, never opened by FFmpeg.
    "crafted/playlist.mp4": (
        _text(b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n../../outside/secret.mp4\n#EXT-X-ENDLIST\n"),
        Q(R.DISALLOWED_CONTAINER),
    ),
    "crafted/concat.mp4": (
        _text(b"ffconcat version 1.0\nfile '/etc/passwd'\nfile '../../outside/secret.mp4'\n"),
        Q(R.DISALLOWED_CONTAINER),
    ),
    "crafted/matroska_named_mp4.mp4": (
        lambda d: write_video(d, container="matroska", seed=9),
        Q(R.DISALLOWED_CONTAINER),
    ),
    # 3 frames at 30 fps: too few, and 0.1 s is below the contract's 0.3 s too
    "crafted/three_frames.mp4": (
        lambda d: write_video(d, frames=3, seed=10),
        Q(R.TOO_FEW_FRAMES, R.DURATION_OUT_OF_BOUNDS),
    ),
    "crafted/tiny_16x16.mp4": (
        lambda d: write_video(d, width=16, height=16, seed=11),
        Q(R.RESOLUTION_OUT_OF_BOUNDS),
    ),
    "crafted/too_wide_1024x64.mp4": (
        lambda d: write_video(d, width=1024, height=64, frames=12, seed=12),
        Q(R.RESOLUTION_OUT_OF_BOUNDS),
    ),
    # more pixels than the contract's max: refused by the probe from the header, never decoded
    "crafted/absurd_1024x512.mp4": (
        lambda d: write_video(d, width=1024, height=512, frames=12, seed=13),
        Q(R.RESOLUTION_OUT_OF_BOUNDS),
    ),
    "crafted/two_fps.mp4": (
        lambda d: write_video(d, fps=2, frames=12, seed=14),
        Q(R.FRAME_RATE_OUT_OF_BOUNDS),
    ),
    "crafted/hevc.mp4": (
        lambda d: write_video(d, codec="libx265", options={"x265-params": "log-level=error"}, seed=15),
        Q(R.UNSUPPORTED_ENCODING),
    ),
    "crafted/ビデオ clip.mp4": (lambda d: write_video(d, seed=16), OK),
    # Refused from the header, as the contract promises, never decoded: not the decoder's errors.
    "crafted/mjpeg_65500x8.mov": (
        lambda d: write_video(
            d, width=65500, height=8, frames=12, codec="mjpeg", container="mov", pix_fmt="yuvj420p"
        ),
        Q(R.UNSUPPORTED_ENCODING, R.RESOLUTION_OUT_OF_BOUNDS),
    ),
    "crafted/mjpeg_30000x30000.mov": (
        _declared_size(30000, 30000),
        Q(R.UNSUPPORTED_ENCODING, R.RESOLUTION_OUT_OF_BOUNDS),
    ),
    # One finding does not hide the others: blank, too small and too fast are all said.
    "crafted/blank_16x16_1000fps.mp4": (
        lambda d: write_video(d, width=16, height=16, fps=1000, frames=400, black=True, seed=17),
        Q(R.BLANK_VIDEO, R.RESOLUTION_OUT_OF_BOUNDS, R.FRAME_RATE_OUT_OF_BOUNDS),
    ),
    "crafted/three_frames_at_2fps.mp4": (
        lambda d: write_video(d, fps=2, frames=3, seed=18),
        Q(R.TOO_FEW_FRAMES, R.FRAME_RATE_OUT_OF_BOUNDS),
    ),
}

#: The video vendor of the catalogue: the northwind profile with bounds that fit tiny test clips.
VIDEO_CONTRACT = {
    "containers": ["mp4", "mov"],
    "codecs": ["h264"],
    "min_width_px": 32,
    "min_height_px": 32,
    "max_width_px": 640,
    "max_height_px": 480,
    "min_fps": 5,
    "max_fps": 120,
}
VIDEO_QUALITY = {"pre": {"min_frames": 10, "min_duration_s": 0.3, "max_duration_s": 3600}}
