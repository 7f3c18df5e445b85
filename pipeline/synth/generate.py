"""Whole drops: plan the timeline, write clean files and one file per requested defect, then the manifest.

Episode ``k`` depends only on the seed, ``k`` and the media options, so a drop is the same whether its files
are written by one process or several (``jobs``), and ``target_size_bytes`` only decides how many clean
files there are. Clean files come first in the timeline, defect files after them.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from pipeline.enums import SourceKind
from pipeline.errors import SluiceError
from pipeline.paths import make_folder, nearest_existing
from pipeline.synth import layout
from pipeline.synth.calibration import NS_PER_S, Calibration, make_calibration
from pipeline.synth.config import RobotDropConfig, VideoDropConfig
from pipeline.synth.defects import (
    CLOCK_JUMP_NS,
    ROBOT_DEFECTS,
    VIDEO_DEFECTS,
    RobotDefect,
    RobotSlot,
    VideoDefect,
    VideoSlot,
    write_clean_clip,
    write_clean_episode,
)
from pipeline.synth.drop import DropFile, DropManifest, write_manifest
from pipeline.synth.robot import EpisodeSpec
from pipeline.synth.video import ClipSpec

# The drop's clock starts here (2025-06-02 08:00 UTC): fixed, never the wall clock, for determinism.
EPOCH_NS = int(datetime(2025, 6, 2, 8, 0, tzinfo=UTC).timestamp()) * NS_PER_S
SESSION_SPACING_NS = 86_400 * NS_PER_S  # one session a day per robot
ROBOT_STAGGER_NS = 15 * 60 * NS_PER_S  # robots start their day 15 min apart
RESET_GAP_S = (20.0, 90.0)  # operator resets the scene between episodes
CALIBRATION_LEAD_NS = 10 * 60 * NS_PER_S  # calibrated 10 min before a session's first episode
CLIPS_PER_FOLDER = 50

TASKS = (
    "pick up the red cube and place it in the blue bin",
    "open the top drawer and take out the spoon",
    "fold the towel in half",
    "stack the green block on the yellow block",
    "wipe the table with the sponge",
    "put the mug on the coaster",
    "insert the peg into the round hole",
    "hand the screwdriver to the person",
)
OPERATORS = ("op-amara", "op-bastian", "op-chen", "op-dalia", "op-emeka")
LOCATIONS = ("kitchen-a", "warehouse-3", "lab-north", "retail-floor", "garage")

GENERATOR = "sluice synth"


class SynthError(SluiceError, ValueError):
    """A drop cannot be written where it was asked to be."""


@dataclass
class _Session:
    index: int
    session_id: str
    calibration: Calibration
    first_start_ns: int
    last_end_ns: int
    episodes: int = 0


@dataclass
class _RobotPlanner:
    """Hands out episode specs in timeline order; every robot keeps its own clock and sessions."""

    config: RobotDropConfig
    count: int = 0
    cursors: dict[int, int] = field(default_factory=dict)
    per_robot: dict[int, int] = field(default_factory=dict)
    sessions: dict[int, list[_Session]] = field(default_factory=dict)

    def next(self, extra_ns: int = 0) -> EpisodeSpec:
        cfg = self.config
        k = self.count
        self.count += 1
        r = k % cfg.robots
        j = self.per_robot.get(r, 0)
        self.per_robot[r] = j + 1
        s, p = divmod(j, cfg.episodes_per_session)
        robot_id = f"rb{r + 1:02d}"
        rng = np.random.default_rng([cfg.seed, k, 0x91A7])
        sessions = self.sessions.setdefault(r, [])
        if p == 0:
            day_start = EPOCH_NS + s * SESSION_SPACING_NS + r * ROBOT_STAGGER_NS
            start = max(day_start, self.cursors.get(r, 0) + 2 * CALIBRATION_LEAD_NS)
            day = datetime.fromtimestamp(start // NS_PER_S, UTC).strftime("%Y%m%d")
            calibration = make_calibration(cfg.seed, r, robot_id, s, cfg.width, cfg.height)
            sessions.append(_Session(s, f"{robot_id}-{day}-s{s:03d}", calibration, start, start))
        else:
            start = self.cursors[r]
        session = sessions[-1]
        end = start + int(cfg.seconds * NS_PER_S) + extra_ns
        session.last_end_ns = end
        session.episodes += 1
        self.cursors[r] = end + int(rng.uniform(*RESET_GAP_S) * NS_PER_S)
        return EpisodeSpec(
            robot_id=robot_id,
            session_id=session.session_id,
            episode_id=f"{session.session_id}-e{p:03d}",
            task=str(rng.choice(TASKS)),
            operator=str(rng.choice(OPERATORS)),
            start_ns=start,
            seconds=cfg.seconds,
            seed=int(rng.integers(0, 2**31)),
            calibration=session.calibration,
        )

    def calibrations(self) -> list[Calibration]:
        """Every session's calibration, valid from just before the session until the next one's."""
        out = []
        for r in sorted(self.sessions):
            sessions = self.sessions[r]
            for i, session in enumerate(sessions):
                valid_from = session.first_start_ns - CALIBRATION_LEAD_NS
                if i + 1 < len(sessions):
                    valid_to = sessions[i + 1].first_start_ns - CALIBRATION_LEAD_NS
                else:
                    valid_to = session.last_end_ns + SESSION_SPACING_NS
                out.append(session.calibration.with_window(valid_from, valid_to))
        return out


_T = TypeVar("_T")
_R = TypeVar("_R")


@contextmanager
def _mapper(jobs: int) -> Iterator[Callable[[Callable[[_T], _R], Sequence[_T]], Iterator[_R]]]:
    """``map`` in this process (jobs=1) or over worker processes; results come back in input order."""
    if jobs <= 1:
        yield lambda fn, items: map(fn, items)
        return
    from pipeline.processes import WorkerPool

    # Spawned, clean children (pipeline.processes): the parent may hold threads (progress display), which
    # fork would copy mid-state.
    with WorkerPool(jobs, name="synth") as pool:
        yield lambda fn, items: pool.map(fn, items)


def _prepare(out: Path, config: RobotDropConfig | VideoDropConfig) -> None:
    """Refuse, before anything is written, a drop that would hold no file, an ``out`` that cannot be a new or
    empty folder and a size target beyond the free space of its filesystem; then make the folder."""
    clean, count = (
        ("episodes", config.episodes) if isinstance(config, RobotDropConfig) else ("clips", config.clips)
    )
    target_size_bytes = config.target_size_bytes
    if count == 0 and not config.defects and not target_size_bytes:
        raise SynthError(
            f"the drop would hold no file: {clean} is 0, with no defect and no size target; allowed: "
            f"{clean} >= 1, or a defect, or a size target"
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SynthError(f"output {out} exists and is not an empty folder; allowed: a new or empty folder")
    existing = nearest_existing(out)
    if existing.is_dir() and target_size_bytes is not None:
        free = shutil.disk_usage(existing).free
        if target_size_bytes > free:
            raise SynthError(
                f"the drop's target size {_size_text(target_size_bytes)} exceeds the {_size_text(free)} "
                f"free on the filesystem of {existing}"
            )
    why_not = make_folder(out)
    if why_not is not None:
        raise SynthError(f"cannot create output folder {out}: {why_not}")


def _size_text(n: int) -> str:
    return f"{n:,} bytes ({n / 1e9:,.1f} GB)"


def _run_robot_defect(item: tuple[RobotDefect, RobotSlot]) -> DropFile:
    defect, slot = item
    return ROBOT_DEFECTS[defect](slot)


def _run_video_defect(item: tuple[VideoDefect, VideoSlot]) -> DropFile:
    defect, slot = item
    return VIDEO_DEFECTS[defect](slot)


def _collect(
    results: Iterator[DropFile], sink: list[DropFile], on_file: Callable[[DropFile], None] | None
) -> None:
    for made in results:
        sink.append(made)
        if on_file is not None:
            on_file(made)


def _grow(target: int | None, made: list[DropFile], min_count: int) -> int:
    """How many more clean files to write: up to ``min_count``, then to ``target`` bytes at the mean size."""
    missing = max(0, min_count - len(made))
    total = sum(f.size_bytes for f in made)
    if target is None or total >= target:
        return missing
    mean = max(1, total // max(1, len(made)))
    return max(missing, math.ceil((target - total) / mean))


def make_robot_drop(
    out: Path, config: RobotDropConfig, *, jobs: int = 1, on_file: Callable[[DropFile], None] | None = None
) -> DropManifest:
    """Write a robot-log drop into the new or empty folder ``out`` and return its manifest.

    ``on_file`` is called with each file as it is finished (for progress display).
    """
    _prepare(out, config)
    planner = _RobotPlanner(config)
    media = config.media()
    clean: list[DropFile] = []
    defective: list[DropFile] = []
    with _mapper(jobs) as run:
        # With a size target, the first batch (at least one episode) tells how big an episode is.
        more = max(config.episodes, 1) if config.target_size_bytes else config.episodes
        while more > 0:
            slots = [RobotSlot(out, planner.next(), media) for _ in range(more)]
            _collect(run(write_clean_episode, slots), clean, on_file)
            more = _grow(config.target_size_bytes, clean, config.episodes)
        items = []
        for defect in config.defects:
            extra = CLOCK_JUMP_NS if defect is RobotDefect.CLOCK_JUMP else 0
            source = clean[0] if clean else None
            items.append((defect, RobotSlot(out, planner.next(extra_ns=extra), media, source)))
        _collect(run(_run_robot_defect, items), defective, on_file)
    calibrations = [c.to_json() for c in planner.calibrations()]
    (out / layout.CALIBRATIONS_FILE).write_text(json.dumps(calibrations, indent=2, sort_keys=True) + "\n")
    files = tuple(clean + defective)
    manifest = DropManifest(
        kind=SourceKind.MCAP,
        generator=f"{GENERATOR} robot",
        options=config.model_dump(mode="json"),
        total_bytes=sum(f.size_bytes for f in files),
        files=files,
        extra_files=(layout.CALIBRATIONS_FILE,),
    )
    write_manifest(out, manifest)
    return manifest


def _clip_spec(config: VideoDropConfig, k: int) -> ClipSpec:
    rng = np.random.default_rng([config.seed, k, 0xC11B])
    return ClipSpec(
        clip_id=f"clip_{k:05d}",
        relpath=f"batch_{k // CLIPS_PER_FOLDER:03d}/clip_{k:05d}.mp4",
        seconds=config.seconds,
        seed=int(rng.integers(0, 2**31)),
        scene_cuts=config.scene_cuts,
        camera_id=k % 16,
        captured_at=_captured_at(config, k),
    )


def _captured_at(config: VideoDropConfig, k: int) -> datetime:
    """When clip ``k`` was recorded: one every 7 minutes or so from the drop's epoch, whole seconds (the MP4
    header keeps seconds); the clip's container says it, and its sidecar too."""
    rng = np.random.default_rng([config.seed, k, 0x51DE])
    captured_ns = EPOCH_NS + k * 7 * 60 * NS_PER_S + int(rng.uniform(0, 300)) * NS_PER_S
    return datetime.fromtimestamp(captured_ns // NS_PER_S, UTC)


def _sidecar(config: VideoDropConfig, spec: ClipSpec, k: int) -> dict[str, Any]:
    rng = np.random.default_rng([config.seed, k, 0x51DE])
    rng.uniform(0, 300)  # the draw _captured_at makes: the location below stays what it was
    return {
        "clip_id": spec.clip_id,
        "camera": f"cam-{spec.camera_id:02d}",
        "captured_at": _captured_at(config, k).isoformat(),
        "location": str(rng.choice(LOCATIONS)),
        "fps": config.fps,
        "width": config.width,
        "height": config.height,
        "duration_s": config.seconds,
    }


def make_video_drop(
    out: Path, config: VideoDropConfig, *, jobs: int = 1, on_file: Callable[[DropFile], None] | None = None
) -> DropManifest:
    """Write a video-vendor drop into the new or empty folder ``out`` and return its manifest."""
    _prepare(out, config)
    media = config.media()
    clean: list[DropFile] = []
    defective: list[DropFile] = []
    count = 0

    def slots(n: int) -> list[VideoSlot]:
        nonlocal count
        made = [
            VideoSlot(out, _clip_spec(config, count + i), media, clean[0] if clean else None)
            for i in range(n)
        ]
        count += n
        return made

    with _mapper(jobs) as run:
        more = max(config.clips, 1) if config.target_size_bytes else config.clips
        while more > 0:
            _collect(run(write_clean_clip, slots(more)), clean, on_file)
            more = _grow(config.target_size_bytes, clean, config.clips)
        items = list(zip(config.defects, slots(len(config.defects)), strict=True))
        _collect(run(_run_video_defect, items), defective, on_file)
    extra: list[str] = []
    if config.sidecars:
        for k in range(count):
            spec = _clip_spec(config, k)
            sidecar = (out / spec.relpath).with_suffix(layout.VIDEO_SIDECAR_SUFFIX)
            sidecar.write_text(json.dumps(_sidecar(config, spec, k), indent=2, sort_keys=True) + "\n")
            extra.append(sidecar.relative_to(out).as_posix())
    files = tuple(clean + defective)
    manifest = DropManifest(
        kind=SourceKind.VIDEO,
        generator=f"{GENERATOR} video",
        options=config.model_dump(mode="json"),
        total_bytes=sum(f.size_bytes for f in files),
        files=files,
        extra_files=tuple(extra),
    )
    write_manifest(out, manifest)
    return manifest
