"""Export a dataset version as a LeRobot v3.0 dataset (see :mod:`.layout`), with a report of what was checked.

Every episode's frames are re-encoded per camera into one MP4 (H.264, no B-frames) with ``pts`` = the
dataset-wide frame index at time base 1/fps, and a forced IDR at each episode's first frame, so that each
episode starts on a keyframe and ``timestamp = frame_index / fps`` holds exactly in the data and the video.
The encoder takes the pictures as the episode's decoder makes them (YUV 4:2:0), so the video loses no more
than that one encode; only the pictures lerobot's image statistics sample are converted to RGB.
The export is written to a staging folder beside ``out`` and renamed into place when every check passed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from av.video.reformatter import ColorRange, Colorspace

from pipeline.errors import InputError, SluiceError
from pipeline.export import layout
from pipeline.export.episode import EpisodeFrames, Pictures, StreamLayoutError, read_episode
from pipeline.export.stats import DatasetStats, downsample, sample_indices
from pipeline.media.x264 import X264_DETERMINISTIC_PARAMS, X264_THREADS

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pipeline.config import VendorConfig

log = logging.getLogger(__name__)

#: Export encode: CRF 23 veryfast as the transcode default; no B-frames so that decode order is display order;
#: one thread and no macroblock tree, so that the same episodes give the same bytes on every run
#: (:mod:`pipeline.media.x264` says why each is needed).
X264_OPTIONS = {
    "crf": "23",
    "preset": "veryfast",
    "bf": "0",
    "forced-idr": "1",
    "threads": str(X264_THREADS),
    "x264-params": ":".join(X264_DETERMINISTIC_PARAMS),
}


#: Splits in the order the export writes their episodes.
SPLIT_ORDER = {"train": 0, "val": 1, "eval": 2}
#: Why a video vendor's clips are not in an export of robot episodes.
VIDEO_RULE = (
    "a LeRobot dataset gives every episode the same features, and a video clip has no observation.state or "
    "action stream nor the robot's cameras: export video episodes as a dataset of their own"
)


class ExportError(SluiceError):
    """The export cannot be made or failed one of its checks (nothing is published)."""


@dataclass
class ExportReport:
    out: str
    episodes: int = 0
    frames: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    #: What makes the export less than the version: episodes left out, splits left with none.
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "out": self.out,
            "episodes": self.episodes,
            "frames": self.frames,
            "ok": self.ok,
            "checks": self.checks,
            "skipped": self.skipped,
            "warnings": self.warnings,
            "details": self.details,
        }


def export_dataset_version(
    engine: Engine,
    name: str,
    version: str,
    out: Path,
    *,
    robot_type: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ExportReport:
    """Export the robot episodes of dataset version ``name@version`` to ``out`` (which must not exist, and
    whose folder must take it: said before any episode is read). ``progress(done, total)`` is called with
    the robot episodes written so far, before each is read and once all are."""
    from sqlalchemy import select

    from pipeline.annotate.inputs import episode_inputs, local_file
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import DatasetVersion, DatasetVersionEpisode
    from pipeline.enums import SourceKind
    from pipeline.paths import entry_refusal

    if os.path.lexists(out):
        raise ExportError(f"{out} exists; give a new folder (an export is never merged into another)")
    why_not = entry_refusal(out)
    if why_not is not None:
        raise ExportError(f"cannot write the export to {out}: {why_not}")
    with session_scope(make_session_factory(engine)) as session:
        version_id = session.execute(
            select(DatasetVersion.id).where(DatasetVersion.name == name, DatasetVersion.version == version)
        ).scalar_one_or_none()
        if version_id is None:
            raise ExportError(f"no dataset version {name}@{version} in the catalog")
        split_of_episode = dict(
            session.execute(
                select(DatasetVersionEpisode.episode_id, DatasetVersionEpisode.split).where(
                    DatasetVersionEpisode.dataset_version_id == version_id
                )
            )
            .tuples()
            .all()
        )
    # split by split (lerobot's info.json names each split as one range of episode indices), by id within
    episode_ids = sorted(split_of_episode, key=lambda e: (SPLIT_ORDER.get(split_of_episode[e] or "", 3), e))
    refs = episode_inputs(engine, episode_ids)
    vendors = _vendor_configs(engine, {ref.vendor for ref in refs.values() if ref.kind is SourceKind.MCAP})
    robot = [e for e in episode_ids if refs[e].kind is SourceKind.MCAP]
    skipped = [
        {"episode_id": e, "why": VIDEO_RULE} for e in episode_ids if refs[e].kind is not SourceKind.MCAP
    ]

    @contextlib.contextmanager
    def named(episode_id: int) -> Iterator[None]:
        """The episode's errors as export errors naming it: on reading it, and on decoding its pictures."""
        ref = refs[episode_id]
        where = f"episode {episode_id} of {name}@{version} (vendor {ref.vendor})"
        try:
            yield
        except StreamLayoutError as exc:  # not what the vendor's contract says, or no camera it decodes
            raise ExportError(f"{where} cannot be exported: {exc.detail}") from exc
        except InputError as exc:  # content that does not decode
            raise ExportError(f"{where} cannot be exported: {exc}") from exc
        except OSError as exc:  # gone from the store, unreadable: the export would not be the version
            raise ExportError(
                f"episode {episode_id} of {name}@{version} cannot be read from {ref.uri} ({exc.strerror or exc}); "
                "`sluice scrub` lists every damaged object"
            ) from exc

    def pictures(episode_id: int, decode: Pictures) -> Iterator[tuple[str, av.VideoFrame]]:
        with named(episode_id):
            yield from decode()

    def episodes() -> Iterator[tuple[int, str, EpisodeFrames]]:
        """One episode at a time, its file at hand (a download, from an object store) until the writer asks
        for the next one: the writer encodes its pictures as they are decoded."""
        for done, e in enumerate(robot):
            if progress is not None:
                progress(done, len(robot))
            ref = refs[e]
            with contextlib.ExitStack() as held:
                with named(e):
                    path = held.enter_context(local_file(ref.uri))
                    frames = read_episode(path, vendors[ref.vendor])
                yield (
                    e,
                    ref.task or "",
                    dataclasses.replace(frames, pictures=functools.partial(pictures, e, frames.pictures)),
                )
                del frames

    # one episode read at a time, and written before the next is read: memory is bound by an episode's
    # state and action (its pictures are never all held)
    report = write_lerobot(
        episodes(),
        out,
        robot_type=robot_type,
        splits=[split_of_episode[e] or "train" for e in robot],
    )
    if progress is not None:
        progress(len(robot), len(robot))
    report.skipped = skipped
    if skipped:
        report.warnings.append(
            f"{len(skipped)} of {len(episode_ids)} episodes of {name}@{version} are video clips, left out: "
            "the export is not the whole version"
        )
        emptied = sorted(
            {split_of_episode[e] or "train" for e in episode_ids}
            - {split_of_episode[e] or "train" for e in robot}
        )
        if emptied:
            report.warnings.append(
                f"split(s) {', '.join(emptied)} of the version have no episode in the export"
            )
    _write_report(out, report)
    return report


def _vendor_configs(engine: Engine, names: set[str]) -> dict[str, VendorConfig]:
    """The config the catalog holds for each vendor: its contract says which topics are state and action."""
    from pydantic import ValidationError
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Vendor
    from pipeline.config import VendorConfig

    with session_scope(make_session_factory(engine)) as session:
        rows = session.execute(select(Vendor.name, Vendor.config).where(Vendor.name.in_(sorted(names)))).all()
    configs = {}
    for vendor, config in rows:
        try:
            configs[vendor] = VendorConfig.model_validate(config)
        except ValidationError as exc:
            raise ExportError(
                f"the catalog's config of vendor {vendor} does not validate ({exc.error_count()} errors): "
                "ingest the vendor with its current file to record it again"
            ) from exc
    return configs


def write_lerobot(
    episodes: Iterable[tuple[int, str, EpisodeFrames]],
    out: Path,
    *,
    robot_type: str | None = None,
    splits: list[str] | None = None,
) -> ExportReport:
    """Write ``(source episode id, task, frames)`` as a LeRobot v3.0 dataset at ``out``; returns the report.

    ``episodes`` is consumed once, each episode's frames encoded before the next is taken, so that a
    generator holds one episode in memory at a time. ``splits[i]`` is episode ``i``'s split (all ``train``
    when None). lerobot's ``info.json`` names a split as one range of episode indices, so the episodes of a
    split must be contiguous: callers pass them in split order (train, val, eval), and other orders are
    refused before anything is read. Every episode must have the first one's fps, cameras, picture sizes and
    state and action names.
    """
    if out.exists():
        raise ExportError(f"{out} exists; give a new folder (an export is never merged into another)")
    ranges = _split_ranges(splits, len(splits)) if splits is not None else None
    staging = out.with_name(f".{out.name}.{uuid.uuid4().hex}.part")
    staging.mkdir(parents=True)
    taken = iter(episodes)
    try:
        report = _write(taken, staging, robot_type, ranges, len(splits) if splits is not None else None)
        report.out = str(out)
        if not report.ok:
            raise ExportError(f"export checks failed: {[k for k, v in report.checks.items() if not v]}")
        os.replace(staging, out)
    finally:
        if isinstance(taken, Generator):  # a failed export lets go of the episode in hand (its download) now
            taken.close()
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return report


class _CameraVideo:
    """One camera's MP4 (H.264, no B-frames): every episode's frames back to back, ``pts`` the dataset-wide
    frame index at time base 1/fps, an IDR at each episode's first frame."""

    def __init__(self, path: Path, fps: int, height: int, width: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fps, self.height, self.width = fps, height, width
        self.shape = (height - height % 2, width - width % 2)  # yuv420p needs even sizes
        self._container = av.open(str(path), "w", format="mp4")
        self._stream = self._container.add_stream("libx264", rate=fps)
        self._stream.width, self._stream.height = self.shape[1], self.shape[0]
        self._stream.pix_fmt = "yuv420p"
        self._stream.time_base = Fraction(1, fps)
        self._stream.options = dict(X264_OPTIONS)
        # said in the stream (H.264 VUI, the MP4's colr box): limited-range BT.601, which encoder_input
        # makes; untagged, a browser may read HD video as BT.709 where FFmpeg and lerobot read BT.601
        codec = self._stream.codec_context
        codec.color_range = ColorRange.MPEG
        codec.colorspace = codec.color_primaries = codec.color_trc = SMPTE170M
        self._index = 0

    def add(self, picture: av.VideoFrame, *, first: bool) -> None:
        """One frame; ``first``: an episode's first, made an IDR (:func:`encoder_input` says what goes in)."""
        frame = encoder_input(picture, *self.shape)
        frame.pts, frame.time_base = self._index, Fraction(1, self.fps)
        frame.pict_type = av.video.frame.PictureType.I if first else av.video.frame.PictureType.NONE
        self._container.mux(self._stream.encode(frame))
        self._index += 1

    def close(self, *, flush: bool) -> None:
        if flush:
            self._container.mux(self._stream.encode(None))
        self._container.close()


#: Colour matrices a decoded frame may be tagged with that the export's BT.601 video means: BT.601
#: (``bt470bg``, ``smpte170m``) or none named, which FFmpeg's decoders read as BT.601.
BT601_SPACES = frozenset({2, 5, 6})  # AVColorSpace: unspecified, bt470bg, smpte170m
#: AVColorSpace, AVColorPrimaries and AVColorTransferCharacteristic ``smpte170m`` (BT.601 525-line): the
#: export's video is tagged with it.
SMPTE170M = 6


def encoder_input(picture: av.VideoFrame, height: int, width: int) -> av.VideoFrame:
    """``picture`` as the export's encoder takes it: ``width`` x ``height`` limited-range BT.601 yuv420p,
    as the export's video is tagged (and as FFmpeg reads untagged video).

    A decoded frame that is that already goes in as it is (the encoder takes its own reference, so a frame
    shown twice is sent twice): no round trip through RGB, which cost 2-4.5 dB; one of that range and
    matrix in another YUV format (10-bit, 4:2:2) is converted to yuv420p directly. Any other (full range, a
    BT.709 or BT.2020 matrix, RGB, an odd size to crop) is converted through RGB as its tags say, so that
    its colours survive: swscale's direct conversion between YUV matrices left a BT.709 camera about two
    levels darker per channel (measured on the transcode, :mod:`pipeline.transcode.cameras`), the RGB
    route is exact to rounding (1.2-1.6 levels in the export's test, 4:2:0 included).
    """
    if (
        (picture.height, picture.width) == (height, width)
        and picture.color_range != ColorRange.JPEG
        and picture.colorspace in BT601_SPACES
    ):  # the right range and matrix: at most the sampling or depth to change (10-bit, 4:2:2)
        return picture if picture.format.name == "yuv420p" else picture.reformat(format="yuv420p")
    rgb = picture.to_ndarray(format="rgb24")[:height, :width]
    return av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb, dtype=np.uint8), format="rgb24").reformat(
        format="yuv420p", dst_colorspace=Colorspace.ITU601, dst_color_range=ColorRange.MPEG
    )


def _features_of(frames: EpisodeFrames) -> EpisodeFrames:
    """``frames`` without its frames: fps, names and each camera's picture size (zero frames of it)."""
    return dataclasses.replace(
        frames,
        pictures=lambda: iter(()),
        state=np.empty((0, frames.state.shape[1]), frames.state.dtype),
        action=np.empty((0, frames.action.shape[1]), frames.action.dtype),
    )


def _differs(first_id: int, first: EpisodeFrames, source_id: int, frames: EpisodeFrames) -> str | None:
    """What makes ``frames`` another feature set than ``first``'s (None when nothing does)."""
    if frames.fps != first.fps:
        return (
            f"its frame rate is {frames.fps} fps, episode {first_id}'s {first.fps}; one dataset has one fps"
        )
    if sorted(frames.sizes) != sorted(first.sizes):
        return f"it has cameras {sorted(frames.sizes)}, episode {first_id} has {sorted(first.sizes)}"
    for cam, (h, w) in frames.sizes.items():
        if (h, w) != first.sizes[cam]:
            return f"its camera {cam} is {w}x{h}, episode {first_id}'s {first.sizes[cam][1]}x{first.sizes[cam][0]}"
    for key, names, want in (
        (layout.STATE_KEY, frames.state_names, first.state_names),
        (layout.ACTION_KEY, frames.action_names, first.action_names),
    ):
        if names != want:
            differ = sorted(set(names) ^ set(want))[:6] or ["their order"]
            return (
                f"its {key} has other fields than episode {first_id}'s ({len(names)} against {len(want)}; "
                f"differing: {', '.join(differ)})"
            )
    return None


def _write(
    episodes: Iterator[tuple[int, str, EpisodeFrames]],
    root: Path,
    robot_type: str | None,
    splits: dict[str, str] | None,
    count: int | None,
) -> ExportReport:
    loc = {"chunk_index": 0, "file_index": 0}
    videos: dict[str, _CameraVideo] = {}
    first: tuple[int, EpisodeFrames] | None = None
    state: list[np.ndarray] = []
    action: list[np.ndarray] = []
    lengths: list[int] = []
    episode_tasks: list[str] = []
    episode_rows = []
    dataset_stats = DatasetStats()
    start = 0
    flushed = False
    try:
        # not a for loop: enumerate's tuple and the loop variable would hold the previous episode's
        # pictures while the next one is read
        ep_index = 0
        while (item := next(episodes, None)) is not None:
            source_id, task, frames = item
            del item
            if count is not None and ep_index >= count:
                raise ExportError(f"{count} splits for more episodes than that")
            if first is None:  # what later episodes must match, without holding its pictures
                first = (source_id, _features_of(frames))
                for cam in sorted(frames.sizes):
                    key = layout.IMAGE_PREFIX + cam
                    h, w = frames.sizes[cam]
                    path = root / layout.VIDEO_PATH.format(video_key=key, **loc)
                    videos[cam] = _CameraVideo(path, frames.fps, h, w)
            else:
                why = _differs(first[0], first[1], source_id, frames)
                if why is not None:
                    raise ExportError(
                        f"episode {source_id} cannot join the export: {why}; one LeRobot dataset has one "
                        "feature set: leave out the episodes of another robot or contract"
                    )
            n = frames.length
            fps = frames.fps
            state.append(frames.state)
            action.append(frames.action)
            lengths.append(n)
            episode_tasks.append(task)
            stats = dataset_stats.add(frames, _encode(frames, videos, source_id))
            row: dict[str, Any] = {
                "episode_index": ep_index,
                "tasks": [task],
                "length": n,
                "data/chunk_index": 0,
                "data/file_index": 0,
                "dataset_from_index": start,
                "dataset_to_index": start + n,
                "meta/episodes/chunk_index": 0,
                "meta/episodes/file_index": 0,
                "sluice/source_episode_id": source_id,
            }
            for cam in videos:
                key = layout.IMAGE_PREFIX + cam
                row[f"videos/{key}/chunk_index"] = 0
                row[f"videos/{key}/file_index"] = 0
                row[f"videos/{key}/from_timestamp"] = start / fps
                row[f"videos/{key}/to_timestamp"] = (start + n) / fps
            for feature, values in stats.items():
                for stat, value in values.items():
                    row[f"stats/{feature}/{stat}"] = np.asarray(value).tolist()
            episode_rows.append(row)
            start += n
            ep_index += 1
            del frames
        flushed = True
    finally:
        _close(videos.values(), flush=flushed)
    if first is None:
        raise ExportError("no robot episode to export")
    if count is not None and count != len(lengths):
        raise ExportError(f"{count} splits for {len(lengths)} episodes")
    first_frames = first[1]
    fps = first_frames.fps
    tasks = sorted(set(episode_tasks))
    task_index = {t: i for i, t in enumerate(tasks)}

    # data
    k = np.concatenate([np.arange(n) for n in lengths])
    dim_s, dim_a = len(first_frames.state_names), len(first_frames.action_names)
    data = pa.table(
        {
            layout.STATE_KEY: _vectors(state, dim_s),
            layout.ACTION_KEY: _vectors(action, dim_a),
            "timestamp": pa.array((k / fps).astype(np.float32), type=pa.float32()),
            "frame_index": pa.array(k, type=pa.int64()),
            "episode_index": pa.array(np.repeat(np.arange(len(lengths)), lengths), type=pa.int64()),
            "index": pa.array(np.arange(start), type=pa.int64()),
            "task_index": pa.array(
                np.repeat([task_index[t] for t in episode_tasks], lengths), type=pa.int64()
            ),
        }
    )
    _parquet(data, root / layout.DATA_PATH.format(**loc))
    _parquet(pa.Table.from_pylist(episode_rows), root / layout.EPISODES_PATH.format(**loc))
    _write_tasks(tasks, root / layout.TASKS_PATH)

    # meta
    features: dict[str, Any] = {
        layout.STATE_KEY: {"dtype": "float32", "shape": [dim_s], "names": first_frames.state_names},
        layout.ACTION_KEY: {"dtype": "float32", "shape": [dim_a], "names": first_frames.action_names},
    }
    for cam, video in videos.items():
        h, w = video.shape
        features[layout.IMAGE_PREFIX + cam] = {
            "dtype": "video",
            "shape": [h, w, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": h,
                "video.width": w,
                "video.codec": "h264",
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": fps,
                "video.channels": 3,
                "has_audio": False,
            },
        }
    features.update(layout.DEFAULT_FEATURES)
    info = {
        "codebase_version": layout.CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": len(lengths),
        "total_frames": start,
        "total_tasks": len(tasks),
        "chunks_size": layout.CHUNKS_SIZE,
        "data_files_size_in_mb": layout.DATA_FILES_SIZE_IN_MB,
        "video_files_size_in_mb": layout.VIDEO_FILES_SIZE_IN_MB,
        "fps": fps,
        "splits": splits if splits is not None else {"train": f"0:{len(lengths)}"},
        "data_path": layout.DATA_PATH,
        "video_path": layout.VIDEO_PATH,
        "features": features,
    }
    _json(root / layout.INFO_PATH, info)
    _json(root / layout.STATS_PATH, dataset_stats.result())
    report = ExportReport(out=str(root), episodes=len(lengths), frames=start)
    check_export(root, report)
    return report


def _encode(frames: EpisodeFrames, videos: dict[str, _CameraVideo], source_id: int) -> dict[str, np.ndarray]:
    """Encode the episode's pictures as they are decoded, each camera's first an IDR; returns each camera's
    pictures that its image statistics use (:func:`~pipeline.export.stats.sample_indices`), downsampled."""
    n = frames.length
    samples = {cam: set(sample_indices(n).tolist()) for cam in videos}
    kept: dict[str, list[np.ndarray]] = {cam: [] for cam in videos}
    counts = dict.fromkeys(videos, 0)
    for cam, picture in frames.pictures():
        k = counts[cam]
        if k == n:
            raise ExportError(f"episode {source_id}: camera {cam} has more pictures than its {n} frames")
        if (picture.height, picture.width) != frames.sizes[cam]:
            h, w = frames.sizes[cam]
            raise ExportError(
                f"episode {source_id}: camera {cam}'s picture {k} is {picture.width}x{picture.height}, "
                f"the camera's pictures {w}x{h}"
            )
        if k in samples[cam]:  # converted to RGB, as lerobot sees the video, for the image statistics
            kept[cam].append(downsample(picture.to_ndarray(format="rgb24")))
        videos[cam].add(picture, first=k == 0)
        counts[cam] = k + 1
    short = {cam: k for cam, k in counts.items() if k != n}
    if short:
        raise ExportError(f"episode {source_id}: cameras {short} gave fewer pictures than its {n} frames")
    return {cam: np.stack(pictures) for cam, pictures in kept.items()}


def _close(videos: Iterable[_CameraVideo], *, flush: bool) -> None:
    """Close every camera's MP4, all of them even when one fails; the first failure is raised after."""
    failed: BaseException | None = None
    for video in videos:
        try:
            video.close(flush=flush)
        except Exception as exc:  # a full disk on the trailer: the other files are closed all the same
            failed = failed or exc
    if failed is not None and flush:  # on an error path the error that got us here is the one to see
        raise failed


def _vectors(parts: list[np.ndarray], dim: int) -> pa.FixedSizeListArray:
    """Episodes' (n, dim) float32 rows as one fixed-size-list column."""
    flat = np.concatenate([p.astype(np.float32, copy=False).reshape(-1) for p in parts])
    return pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()), dim)


def _split_ranges(split_of: list[str], n: int) -> dict[str, str]:
    """``{"train": "0:3", "val": "3:4"}`` as lerobot's ``info.json`` writes splits (``start:stop`` indices)."""
    ranges: dict[str, str] = {}
    start = 0
    for i in range(1, n + 1):
        if i == n or split_of[i] != split_of[start]:
            if split_of[start] in ranges:
                raise ExportError(f"the episodes of split {split_of[start]!r} are not contiguous")
            ranges[split_of[start]] = f"{start}:{i}"
            start = i
    return ranges


def check_export(root: Path, report: ExportReport) -> None:
    """Re-read the export and record each check in ``report`` (frame counts, timestamps, keyframes, layout)."""
    info = json.loads((root / layout.INFO_PATH).read_text())
    fps = info["fps"]
    data = pq.read_table(root / layout.DATA_PATH.format(chunk_index=0, file_index=0))
    eps = pq.read_table(root / layout.EPISODES_PATH.format(chunk_index=0, file_index=0)).to_pylist()
    lengths = [e["length"] for e in eps]
    report.checks["layout"] = (
        all((root / p).is_file() for p in (layout.INFO_PATH, layout.STATS_PATH, layout.TASKS_PATH))
        and info["codebase_version"] == layout.CODEBASE_VERSION
    )
    report.checks["frames_equal_sum_of_lengths"] = data.num_rows == sum(lengths) == info["total_frames"]
    frame_index = np.asarray(data.column("frame_index"))
    timestamp = np.asarray(data.column("timestamp"))
    report.checks["timestamp_is_frame_index_over_fps"] = bool(
        np.array_equal(timestamp, (frame_index / fps).astype(np.float32))
    )
    report.checks["index_contiguous"] = bool(
        np.array_equal(np.asarray(data.column("index")), np.arange(data.num_rows))
    )
    starts = [e["dataset_from_index"] for e in eps]
    keys = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    per_camera = {}
    for key in keys:
        path = root / layout.VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            packets = [
                (int(p.pts), bool(p.is_keyframe)) for p in container.demux(stream) if p.pts is not None
            ]
            tb = stream.time_base or Fraction(1, fps)
        pts_frames = sorted(round(Fraction(pts) * tb * fps) for pts, _ in packets)
        keyframes = {round(Fraction(pts) * tb * fps) for pts, key in packets if key}
        per_camera[key] = {
            "frames": len(packets),
            "episodes_starting_on_keyframe": sum(s in keyframes for s in starts),
        }
        report.checks[f"{key}: frames_equal_sum_of_lengths"] = len(packets) == sum(lengths)
        report.checks[f"{key}: pts_is_frame_grid"] = pts_frames == list(range(sum(lengths)))
        report.checks[f"{key}: every_episode_starts_on_keyframe"] = all(s in keyframes for s in starts)
    report.details = {"fps": fps, "lengths": lengths, "videos": per_camera}


def _write_tasks(tasks: list[str], path: Path) -> None:
    """tasks.parquet as lerobot reads it with pandas: the task text is the index, ``task_index`` a column."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"task_index": range(len(tasks))}, index=pd.Index(tasks, name="task")).to_parquet(path)


def _parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="snappy")


def _json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=4, default=lambda o: np.asarray(o).tolist()))


def _write_report(out: Path, report: ExportReport) -> None:
    (out / layout.REPORT_PATH).write_text(json.dumps(report.as_dict(), indent=2, default=str))
