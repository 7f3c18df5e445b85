"""What an annotator reads: one episode's file (the transcoded output when there is one, else the raw
input), decoded lazily and once for all annotators of the episode.

* :meth:`EpisodeSource.frames` – luma frames of the primary camera (robot logs: the contract's first camera;
  videos: the first video stream), shrunk to at most :data:`WORK_WIDTH_PX` wide. Long episodes are decimated
  while decoding (every second kept frame dropped whenever :data:`DEFAULT_MAX_FRAMES` is passed), so memory
  stays bounded however long the episode; the kept frames' indices say which ones they are.
* :meth:`EpisodeSource.rgb_frames` – chosen frames in colour at the same size, for a model that needs colour
  (the captioner): one more decoding pass that stops after the last frame asked for, so luma stays the
  only thing kept for the whole episode (a third of RGB's memory).
* :meth:`EpisodeSource.state` – the state stream as arrays (robot logs).
* :meth:`EpisodeSource.metadata` – the episode's ``episode`` metadata record and its catalog task text.
* :meth:`EpisodeSource.messages` – raw payloads of chosen topics.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.enums import ReasonCode, SourceKind
from pipeline.errors import InputError

log = logging.getLogger(__name__)

#: Working width of decoded luma frames: every built-in statistic is stable at this size, and 512 frames of
#: 320x240 are 39 MB.
WORK_WIDTH_PX = 320
#: Most frames kept per episode (decimated while decoding): a minute at 30 fps keeps every fourth frame.
DEFAULT_MAX_FRAMES = 512
VIDEO_SCHEMA = "foxglove.CompressedVideo"
#: Frames :meth:`EpisodeSource.native_luma` decodes at the coded size: a second at 30 fps, enough for a
#: field detector's history and for block statistics; 32 frames of 1280x720 luma are 29 MB.
NATIVE_FRAMES = 32


@dataclass(frozen=True)
class Frames:
    """Decoded luma frames of one camera: ``luma[i]`` is frame ``indices[i]`` of ``total`` decoded."""

    camera: str
    luma: np.ndarray  # (n, h, w) uint8
    indices: np.ndarray  # (n,) int64, rising
    total: int
    fps: float

    @property
    def stride(self) -> int:
        return int(self.indices[1] - self.indices[0]) if len(self.indices) > 1 else 1


@dataclass(frozen=True)
class StateSeries:
    """The robot's state stream as arrays (NaN where a message lacks a field)."""

    topic: str
    stamp_ns: np.ndarray  # (n,) int64
    position: np.ndarray  # (n, joints)
    velocity: np.ndarray  # (n, joints)
    gripper: np.ndarray  # (n,)


@dataclass
class EpisodeSource:
    """One episode as annotators see it; built by the annotate step (or a test) and passed in."""

    episode_id: int
    kind: SourceKind
    path: Path
    sha256: str
    camera_topic: str | None = None  # robot logs: the primary camera's topic
    state_topic: str | None = None  # robot logs: the state stream's topic
    action_topic: str | None = None
    task: str | None = None  # from the catalog (quality_pre read it from the episode metadata)
    max_frames: int = DEFAULT_MAX_FRAMES
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    # -- video ------------------------------------------------------------------------------------------

    def frames(self) -> Frames:
        """Luma frames of the primary camera (decoded on first call, then cached)."""
        if "frames" not in self._cache:
            self._cache["frames"] = self._decode_frames()
        frames: Frames = self._cache["frames"]
        return frames

    def _decode_frames(self) -> Frames:
        kept = _Decimator(self.max_frames)
        for frame in self._decoded():
            kept.add(_luma(frame))
        camera = self._camera_name()
        if kept.total == 0:
            raise InputError(ReasonCode.TOO_FEW_FRAMES.value, f"{camera}: no frame decodes")
        luma, indices = kept.result()
        return Frames(camera=camera, luma=luma, indices=indices, total=kept.total, fps=self._fps())

    def rgb_frames(self, wanted: Sequence[int]) -> np.ndarray:
        """Decoded frames number ``wanted`` (positions among all decoded frames, as :attr:`Frames.indices`
        holds them) as RGB at the working size, ``(n, h, w, 3)`` uint8, in the order asked."""
        if not wanted:
            return np.zeros((0, 0, 0, 3), dtype=np.uint8)
        todo, last = set(wanted), max(wanted)
        found: dict[int, np.ndarray] = {}
        for index, frame in enumerate(self._decoded()):
            if index in todo:
                found[index] = _working(frame, "rgb24")
            if index >= last:
                break
        missing = sorted(todo - found.keys())
        if missing:
            raise InputError(
                ReasonCode.TOO_FEW_FRAMES.value,
                f"{self._camera_name()}: frames {missing} asked for, {len(found)} of them decode",
            )
        return np.stack([found[i] for i in wanted])

    def native_luma(self, count: int = NATIVE_FRAMES) -> np.ndarray:
        """The first ``count`` decoded frames as luma at the coded size, ``(n, h, w)`` uint8 (cached).

        Measures of the coding itself (block edges, interlaced fields) need the coded pixel grid, which the
        shrunk :meth:`frames` no longer has; consecutive frames also let a field detector see motion. Only
        the first ``count`` frames are decoded, so this costs little however long the episode.
        """
        asked, cached = self._cache.get("native_luma", (0, None))
        if cached is None or asked < count:
            import itertools

            out = [
                np.asarray(f.to_ndarray(format="gray"), dtype=np.uint8)
                for f in itertools.islice(self._decoded(), count)
            ]
            if not out:
                raise InputError(ReasonCode.TOO_FEW_FRAMES.value, f"{self._camera_name()}: no frame decodes")
            cached = np.stack(out)
            self._cache["native_luma"] = (count, cached)
        native: np.ndarray = cached
        return native[:count]

    def _camera_name(self) -> str:
        return "video" if self.kind is SourceKind.VIDEO else (self.camera_topic or "")

    def _fps(self) -> float:
        if self.kind is SourceKind.VIDEO:
            return float(self._cache.get("video_fps", 30.0))
        return self._camera_rate_hz()

    def _decoded(self) -> Iterator[Any]:
        """The primary camera's decoded frames (PyAV ``VideoFrame``), in order; stops when the caller does."""
        import av

        if self.kind is SourceKind.VIDEO:
            try:
                with av.open(str(self.path)) as container:
                    stream = container.streams.video[0]
                    rate = stream.average_rate or stream.guessed_rate
                    self._cache["video_fps"] = float(rate) if rate else 30.0
                    yield from container.decode(stream)
            except (av.FFmpegError, IndexError, OSError) as exc:
                raise InputError(ReasonCode.DECODE_ERROR.value, f"{self.path.name}: {exc}") from None
            return
        if self.camera_topic is None:
            raise InputError(ReasonCode.ANNOTATOR_FAILED.value, "no camera topic for this robot log")
        camera = self.camera_topic
        self._cache["camera_log_times"] = []
        decoder = av.CodecContext.create("h264", "r")
        for index, data in enumerate(self._camera_units()):
            packet = av.Packet(data)
            packet.pts = index
            try:
                yield from decoder.decode(packet)
            except av.FFmpegError as exc:
                raise InputError(ReasonCode.DECODE_ERROR.value, f"{camera} unit {index}: {exc}") from None
        yield from decoder.decode(None)

    def _camera_units(self) -> Iterator[bytes]:
        from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo

        from pipeline.mcaplog import iter_messages

        stamps = self._cache.setdefault("camera_log_times", [])
        for _schema, _channel, message in iter_messages(self.path, [self.camera_topic or ""]):
            stamps.append(message.log_time)
            yield CompressedVideo.FromString(message.data).data

    def _camera_rate_hz(self) -> float:
        stamps = np.asarray(self._cache.get("camera_log_times", []), dtype=np.int64)
        if len(stamps) < 2:
            return 30.0
        return float(1e9 / float(np.median(np.diff(np.sort(stamps)))))

    # -- state ------------------------------------------------------------------------------------------

    def state(self) -> StateSeries:
        """The state stream (decoded on first call, then cached)."""
        if "state" not in self._cache:
            self._cache["state"] = self._read_state()
        state: StateSeries = self._cache["state"]
        return state

    def _read_state(self) -> StateSeries:
        from pipeline.mcaplog import decode_json, iter_messages

        if self.kind is not SourceKind.MCAP or self.state_topic is None:
            raise InputError(ReasonCode.ANNOTATOR_FAILED.value, "this episode has no state stream")
        stamps: list[int] = []
        positions: list[Sequence[float]] = []
        velocities: list[Sequence[float]] = []
        grippers: list[float] = []
        for _schema, _channel, message in iter_messages(self.path, [self.state_topic]):
            payload = decode_json(message.data)
            stamps.append(int(payload.get("stamp_ns", message.log_time)))
            positions.append(payload.get("position") or [])
            velocities.append(payload.get("velocity") or [])
            grip = payload.get("gripper")
            grippers.append(float(grip) if isinstance(grip, int | float) else float("nan"))
        if not stamps:
            raise InputError(
                ReasonCode.ANNOTATOR_FAILED.value, f"state topic {self.state_topic} has no messages"
            )
        return StateSeries(
            topic=self.state_topic,
            stamp_ns=np.asarray(stamps, dtype=np.int64),
            position=_rectangular(positions),
            velocity=_rectangular(velocities),
            gripper=np.asarray(grippers, dtype=np.float64),
        )

    # -- metadata and messages ----------------------------------------------------------------------------

    def metadata(self) -> dict[str, str]:
        """The log's ``episode`` metadata record (empty for videos or logs without one)."""
        if "metadata" not in self._cache:
            self._cache["metadata"] = self._read_metadata()
        metadata: dict[str, str] = self._cache["metadata"]
        return metadata

    def _read_metadata(self) -> dict[str, str]:
        if self.kind is not SourceKind.MCAP:
            return {}
        from mcap.reader import make_reader

        with open(self.path, "rb") as fh:
            reader = make_reader(fh)
            for record in reader.iter_metadata():
                if record.name == "episode":
                    return dict(record.metadata)
        return {}

    def messages(self, topics: Sequence[str] | None = None) -> Iterator[tuple[str, int, bytes]]:
        """``(topic, log_time_ns, payload)`` of the given topics (all when None), in log-time order."""
        from pipeline.mcaplog import iter_messages

        if self.kind is not SourceKind.MCAP:
            raise InputError(ReasonCode.ANNOTATOR_FAILED.value, "a video has no messages")
        for _schema, channel, message in iter_messages(self.path, topics):
            yield channel.topic, message.log_time, message.data

    @cached_property
    def topics(self) -> dict[str, str]:
        """Topic -> schema name of every channel of a robot log."""
        from mcap.reader import make_reader

        if self.kind is not SourceKind.MCAP:
            return {}
        with open(self.path, "rb") as fh:
            summary = make_reader(fh).get_summary()
        if summary is None:
            return {}
        return {
            ch.topic: (summary.schemas[ch.schema_id].name if ch.schema_id in summary.schemas else "")
            for ch in summary.channels.values()
        }


class _Decimator:
    """Keeps at most ``2 * limit`` frames while decoding: past that, every second kept frame is dropped and
    the stride doubles, so the kept frames stay evenly spaced."""

    def __init__(self, limit: int) -> None:
        self.limit = max(2, limit)
        self.stride = 1
        self.total = 0
        self.frames: list[np.ndarray] = []
        self.indices: list[int] = []

    def add(self, luma: np.ndarray) -> None:
        index = self.total
        self.total += 1
        if index % self.stride:
            return
        self.frames.append(luma)
        self.indices.append(index)
        if len(self.frames) >= 2 * self.limit:
            self.frames = self.frames[::2]
            self.indices = self.indices[::2]
            self.stride *= 2

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        frames, indices = self.frames, self.indices
        if len(frames) > self.limit:
            step = -(-len(frames) // self.limit)
            frames, indices = frames[::step], indices[::step]
        return np.stack(frames), np.asarray(indices, dtype=np.int64)


def _luma(frame: Any) -> np.ndarray:
    """A decoded frame as luma, shrunk to at most :data:`WORK_WIDTH_PX` wide (even sizes)."""
    return _working(frame, "gray")


def _working(frame: Any, pixel_format: str) -> np.ndarray:
    """A decoded frame in ``pixel_format`` (gray, rgb24), shrunk to at most :data:`WORK_WIDTH_PX` wide."""
    width, height = frame.width, frame.height
    if width > WORK_WIDTH_PX:
        height = max(2, round(height * WORK_WIDTH_PX / width / 2) * 2)
        width = WORK_WIDTH_PX
    out = frame.reformat(width=width, height=height, format=pixel_format, interpolation="AREA")
    return np.asarray(out.to_ndarray(), dtype=np.uint8)


def _rectangular(rows: list[Sequence[float]]) -> np.ndarray:
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), np.nan)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out
