"""Small synthetic inputs for the quality tests, made on first use and shared by the session.

Robot logs come from :func:`pipeline.synth.robot.write_episode` (with its defect tweaks) or from a clean one
rewritten with the stock ``mcap`` writer; videos from :func:`pipeline.synth.video.write_clip` or encoded here
with PyAV when the synthesiser has no such defect (half-black, letterboxed); the post-gate's output is a
real transcode of a small episode.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from functools import cached_property
from pathlib import Path

import av
import numpy as np
from mcap.records import Channel, Message

from pipeline.mcaplog.rewrite import rewrite_with_stock_writer
from pipeline.synth import layout
from pipeline.synth.calibration import make_calibration
from pipeline.synth.robot import EpisodeMedia, EpisodeSpec, EpisodeTweaks, write_episode
from pipeline.synth.video import ClipMedia, ClipSpec, write_clip

START_NS = 1_748_851_200_000_000_000
# 1.5 s at 30 Hz: 45 frames per camera, above the example vendors' 30-frame and 1 s minimums.
SECONDS = 1.5
# Tiny robot frames for the pre-gate (it reads structure and timing); 128x96 for the transcode, whose
# profiles and PSNR sampling need a few 8x8 cells of picture.
PRE_SIZE, POST_SIZE = (64, 48), (128, 96)
CLIP_SIZE, CLIP_FPS = (160, 120), 30


def _episode(path: Path, size: tuple[int, int], tweaks: EpisodeTweaks | None = None) -> Path:
    calibration = make_calibration(0, 0, "rb01", 0, *size)
    spec = EpisodeSpec(
        "rb01", "rb01-s000", "rb01-s000-e000", "fold the towel", "op-chen", START_NS, SECONDS, 7, calibration
    )
    write_episode(path, spec, EpisodeMedia(width=size[0], height=size[1]), tweaks)
    return path


def _flavored(path: Path, flavor: str, tweaks: EpisodeTweaks | None = None) -> Path:
    """A ROS 2 or Foxglove flavored episode (pipeline.synth.flavors) at the transcode's size."""
    calibration = make_calibration(0, 0, "rb01", 0, *POST_SIZE)
    spec = EpisodeSpec(
        "rb01", "rb01-s000", "rb01-s000-e000", "fold the towel", "op-chen", START_NS, SECONDS, 7, calibration
    )
    write_episode(path, spec, EpisodeMedia(width=POST_SIZE[0], height=POST_SIZE[1], flavor=flavor), tweaks)
    return path


#: The frame of the first camera whose JPEG the ``bad_huffman`` input damages.
BAD_HUFFMAN_FRAME = 22


def _damage_huffman_table(jpeg: bytes) -> bytes:
    """A JPEG whose first Huffman table is garbage (every marker and length intact): only a decode sees it."""
    at = jpeg.index(b"\xff\xc4")
    return jpeg[: at + 5] + b"\xff" * 16 + jpeg[at + 21 :]


def _encode(path: Path, frames: list[np.ndarray]) -> Path:
    """An H.264 MP4 of RGB frames at ``CLIP_FPS`` (PyAV / libx264)."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=Fraction(CLIP_FPS))
        stream.width, stream.height = CLIP_SIZE
        stream.pix_fmt = "yuv420p"
        for rgb in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def _noise(rng: np.random.Generator) -> np.ndarray:
    width, height = CLIP_SIZE
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


class Inputs:
    """The synthetic files, each written the first time a test asks for it."""

    def __init__(self, root: Path, corpus: Path) -> None:
        self.root = root
        self.corpus = corpus

    # -- robot logs ----------------------------------------------------------------------------------------
    @cached_property
    def clean(self) -> Path:
        return _episode(self.root / "clean.mcap", PRE_SIZE)

    @cached_property
    def dropped_frames(self) -> Path:
        """20 % of one camera's frames missing."""
        tweaks = EpisodeTweaks(drop_camera=layout.CAMERA_NAMES[1], drop_fraction=0.2)
        return _episode(self.root / "dropped.mcap", PRE_SIZE, tweaks)

    @cached_property
    def clock_jump(self) -> Path:
        """A 5 s step of the recorder clock half-way."""
        tweaks = EpisodeTweaks(clock_jump_at_s=SECONDS / 2, clock_jump_ns=5_000_000_000)
        return _episode(self.root / "jump.mcap", PRE_SIZE, tweaks)

    @cached_property
    def backward(self) -> Path:
        """Joint-state log times stepping backwards 3 times."""
        tweaks = EpisodeTweaks(backward_topic=layout.JOINT_STATE_TOPIC, backward_steps=3)
        return _episode(self.root / "backward.mcap", PRE_SIZE, tweaks)

    @cached_property
    def extra_cbor_channel(self) -> Path:
        """An uncontracted channel in an encoding the example contract does not list."""
        return _episode(self.root / "cbor.mcap", PRE_SIZE, EpisodeTweaks(extra_channel_encoding="cbor"))

    @cached_property
    def duplicate_times(self) -> Path:
        """Every 20th joint-state message repeats its predecessor's log time."""
        previous: dict[str, int] = {}
        count = {"n": 0}

        def repeat(channel: Channel, message: Message) -> list[Message]:
            log_time = message.log_time
            if channel.topic == layout.JOINT_STATE_TOPIC:
                count["n"] += 1
                if count["n"] % 20 == 0:
                    log_time = previous[channel.topic]
                previous[channel.topic] = log_time
            return [dataclasses.replace(message, log_time=log_time)]

        return rewrite_with_stock_writer(self.clean, self.root / "duplicates.mcap", edit=repeat)

    # -- ROS 2 flavors -------------------------------------------------------------------------------------
    @cached_property
    def ros2_jpeg(self) -> Path:
        return _flavored(self.root / "ros2_jpeg.mcap", "ros2-jpeg")

    @cached_property
    def ros2_raw(self) -> Path:
        return _flavored(self.root / "ros2_raw.mcap", "ros2-raw")

    @cached_property
    def bad_huffman(self) -> Path:
        """:attr:`ros2_jpeg` with one picture's Huffman table damaged (the CDR envelope keeps its length)."""
        topic = f"/cam/{layout.CAMERA_NAMES[0]}/image_raw/compressed"
        seen = {"n": 0}

        def damage(channel: Channel, message: Message) -> list[Message]:
            if channel.topic != topic:
                return [message]
            seen["n"] += 1
            if seen["n"] - 1 != BAD_HUFFMAN_FRAME:
                return [message]
            start = message.data.index(b"\xff\xd8\xff")
            data = message.data[:start] + _damage_huffman_table(message.data[start:])
            return [dataclasses.replace(message, data=data)]

        return rewrite_with_stock_writer(self.ros2_jpeg, self.root / "bad_huffman.mcap", edit=damage)

    # -- post-gate -----------------------------------------------------------------------------------------
    @cached_property
    def post_source(self) -> Path:
        return _episode(self.root / "post_source.mcap", POST_SIZE)

    def transcoded(self, vendor: object) -> Path:
        """The post-gate source transcoded under ``vendor``'s transcode options (cached)."""
        from pipeline.transcode import Provenance, RobotTranscodeConfig, transcode_episode

        out = self.root / "transcoded.mcap"
        if not out.exists():
            provenance = Provenance(source_sha256="ab" * 32, config_hash="cd" * 32, code_version="test")
            config = RobotTranscodeConfig.from_vendor(vendor)  # type: ignore[arg-type]
            transcode_episode(self.post_source, out, config, provenance)
        return out

    def transcoded_short(self, vendor: object) -> Path:
        """The transcode with the last frame of one camera dropped: one frame short, 1/30 s shorter."""
        out = self.root / "transcoded_short.mcap"
        if out.exists():
            return out
        topic = f"/cam/{layout.CAMERA_NAMES[1]}/h264"
        seen = {"n": 0}

        def drop_last(channel: Channel, message: Message) -> list[Message]:
            if channel.topic == topic:
                seen["n"] += 1
                if seen["n"] == round(SECONDS * layout.CAMERA_RATE_HZ):
                    return []
            return [message]

        return rewrite_with_stock_writer(self.transcoded(vendor), out, edit=drop_last)

    def clips(self, vendor: object) -> Path:
        """The folder of clips cut from :attr:`clip` under ``vendor``'s transcode options (cached)."""
        from pipeline.transcode.clips import transform_video

        out = self.root / "clips"
        if not out.exists():
            out.mkdir()
            transform_video(self.clip, out, vendor.transcode)  # type: ignore[attr-defined]
        return out

    # -- videos --------------------------------------------------------------------------------------------
    @cached_property
    def clip(self) -> Path:
        spec = ClipSpec("clip0", "clip0.mp4", SECONDS, seed=3, scene_cuts=0)
        width, height = CLIP_SIZE
        write_clip(
            self.root / "clip0.mp4", spec, ClipMedia(width=width, height=height, fps=Fraction(CLIP_FPS))
        )
        return self.root / "clip0.mp4"

    @cached_property
    def half_black(self) -> Path:
        """Black frames, then noise: half the sampled frames are blank."""
        rng = np.random.default_rng(5)
        n = round(SECONDS * CLIP_FPS)
        black = np.zeros((CLIP_SIZE[1], CLIP_SIZE[0], 3), dtype=np.uint8)
        return _encode(self.root / "half_black.mp4", [black if i < n // 2 else _noise(rng) for i in range(n)])

    @cached_property
    def letterboxed(self) -> Path:
        """Noise between black bars covering a fifth of the height at the top and at the bottom."""
        rng = np.random.default_rng(6)
        bar = CLIP_SIZE[1] // 5
        frames = []
        for _ in range(round(SECONDS * CLIP_FPS)):
            frame = _noise(rng)
            frame[:bar] = 0
            frame[-bar:] = 0
            frames.append(frame)
        return _encode(self.root / "letterboxed.mp4", frames)

    @cached_property
    def variable_rate(self) -> Path:
        """Noise at CLIP_FPS where every fifth interval is 1.5 periods: 20 % of intervals half a period off."""
        rng = np.random.default_rng(8)
        path = self.root / "variable_rate.mp4"
        with av.open(str(path), "w") as out:
            stream = out.add_stream("libx264", rate=Fraction(CLIP_FPS))
            stream.width, stream.height = CLIP_SIZE
            stream.pix_fmt = "yuv420p"
            # A fine time base so that the uneven timestamps survive the muxer.
            stream.codec_context.time_base = Fraction(1, CLIP_FPS * 2)
            pts = 0
            for i in range(round(SECONDS * CLIP_FPS)):
                frame = av.VideoFrame.from_ndarray(_noise(rng), format="rgb24")
                frame.pts, frame.time_base = pts, Fraction(1, CLIP_FPS * 2)
                pts += 3 if i % 5 == 4 else 2
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        return path

    @property
    def heavy_hevc(self) -> Path:
        """The corpus's heaviest decode: a 1080p 10-bit HEVC clip (its decoder needs over 64 MiB)."""
        return self.corpus / "video" / "sample_edit_list_no_sync_frame_before_edit.mp4"
