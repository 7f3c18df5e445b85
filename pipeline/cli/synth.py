"""``sluice synth robot|video OUT``: write a synthetic vendor drop and print what it holds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from pipeline.synth.drop import DropFile, DropManifest

app = typer.Typer(no_args_is_help=True, help="Make synthetic vendor drops, with named defects on request.")

# Heavy imports (PyAV, numpy, mcap) happen inside the commands, so `sluice --help` stays fast; the defect
# names are spelled out here for the same reason and checked against the enums by a test.
ROBOT_DEFECT_NAMES = (
    "truncated", "crc_flipped", "non_monotonic", "clock_jump", "dropped_frames", "missing_topic",
    "unknown_encoding", "duplicate", "zero_bytes", "corrupt_image", "renamed_joints",
)  # fmt: skip
ROBOT_FLAVOR_NAMES = (
    "default", "foxglove-h265", "foxglove-jpeg", "foxglove-png", "foxglove-raw", "ros2-h264", "ros2-h265",
    "ros2-jpeg", "ros2-png", "ros2-raw",
)  # fmt: skip
VIDEO_DEFECT_NAMES = (
    "interlaced", "all_black", "rotated", "corrupt_bitstream", "zero_bytes", "duplicate", "reencoded",
    "colour_change",
)  # fmt: skip


def _default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def _run(kind: str, out: Path, values: dict[str, object], jobs: int) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pipeline.cli._common import make_console
    from pipeline.synth import (
        RobotDropConfig,
        VideoDropConfig,
        build_config,
        make_robot_drop,
        make_video_drop,
    )

    console = make_console()
    robot_config = video_config = None
    if kind == "robot":
        robot_config = build_config(RobotDropConfig, "sluice synth robot", **values)
        target, files = robot_config.target_size_bytes, robot_config.episodes + len(robot_config.defects)
    else:
        video_config = build_config(VideoDropConfig, "sluice synth video", **values)
        target, files = video_config.target_size_bytes, video_config.clips + len(video_config.defects)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        if target:
            task = progress.add_task(f"writing {kind} drop (bytes)", total=target)
        else:
            task = progress.add_task(f"writing {kind} drop (files)", total=files)

        def on_file(made: DropFile) -> None:
            progress.advance(task, made.size_bytes if target else 1)

        if robot_config is not None:
            manifest = make_robot_drop(out, robot_config, jobs=jobs, on_file=on_file)
        else:
            assert video_config is not None
            manifest = make_video_drop(out, video_config, jobs=jobs, on_file=on_file)
    _print(console, out, manifest)


def _print(console: Console, out: Path, manifest: DropManifest) -> None:
    from pipeline.cli._common import print_table
    from pipeline.synth.defects import TRANSCODE_DEFECTS

    rows = []
    for made in manifest.files:
        expected = made.expected_state.value
        if made.expected_reasons:
            expected += f" ({', '.join(r.value for r in made.expected_reasons)})"
        if made.defect in TRANSCODE_DEFECTS:
            expected += " at transcode"  # ingest and the pre-gate accept it
        rows.append(
            {
                "file": made.path,
                "bytes": f"{made.size_bytes:,}",
                "defect": made.defect or "-",
                "expected": expected,
            }
        )
    print_table(
        f"{manifest.generator} -> {out}",
        rows,
        ["file", "bytes", "defect", "expected"],
        justify_right=["bytes"],
    )
    console.print(
        f"{len(manifest.files)} files, {manifest.total_bytes:,} bytes; manifest {out / 'drop.json'}",
        highlight=False,
    )


def _size(text: str | None) -> int | None:
    from pipeline.synth.drop import parse_size

    return None if text is None else parse_size(text)


def _defects(names: list[str] | None, allowed: tuple[str, ...]) -> tuple[str, ...]:
    from pipeline.errors import UnknownChoiceError

    for name in names or ():
        if name not in allowed:
            raise UnknownChoiceError("defect", name, allowed)
    return tuple(names or ())


_Out = Annotated[Path, typer.Argument(help="New or empty folder for the drop.")]
_Seed = Annotated[int, typer.Option(help="Same seed and options, same bytes.")]
_Size = Annotated[str | None, typer.Option(help="Grow the drop to at least this many bytes (e.g. 2GB).")]
_Crf = Annotated[int, typer.Option(help="x264 constant rate factor.")]
_Jobs = Annotated[int | None, typer.Option(min=1, help="Worker processes (default: all cores).")]


@app.command()
def robot(
    out: _Out,
    episodes: Annotated[int, typer.Option(help="Clean episodes (at least; --size may add more).")] = 3,
    seconds: Annotated[float, typer.Option(help="Length of each episode.")] = 2.0,
    seed: _Seed = 0,
    defect: Annotated[
        list[str] | None,
        typer.Option(help=f"Add one file with this defect (repeatable): {', '.join(ROBOT_DEFECT_NAMES)}."),
    ] = None,
    size: _Size = None,
    width: Annotated[int, typer.Option(help="Camera width (multiple of 8).")] = 320,
    height: Annotated[int, typer.Option(help="Camera height (multiple of 8).")] = 240,
    robots: Annotated[int, typer.Option(help="Robots sharing the drop.")] = 2,
    episodes_per_session: Annotated[int, typer.Option(help="Episodes per recording session.")] = 3,
    preset: Annotated[str, typer.Option(help="x264 preset.")] = "ultrafast",
    crf: _Crf = 23,
    flavor: Annotated[
        str,
        typer.Option(help=f"Message shapes: {', '.join(ROBOT_FLAVOR_NAMES)} (default: TOPICS.md's)."),
    ] = "default",
    pixel_encoding: Annotated[str, typer.Option(help="Raw flavors' pixel encoding (ROS name).")] = "rgb8",
    footage: Annotated[
        Path | None,
        typer.Option(
            help="A video file the cameras film instead of the procedural scene (each its own window)."
        ),
    ] = None,
    jobs: _Jobs = None,
) -> None:
    """Write MCAP robot logs (3 cameras, joint states, actions, calibrations) into OUT; the cameras are H.264
    unless --flavor picks ROS 2 or Foxglove shapes (JPEG, PNG, raw, H.265 cameras, CDR JointState...)."""
    from pipeline.errors import UnknownChoiceError

    if flavor not in ROBOT_FLAVOR_NAMES:
        raise UnknownChoiceError("flavor", flavor, ROBOT_FLAVOR_NAMES)
    values = dict(
        episodes=episodes, seconds=seconds, seed=seed, defects=_defects(defect, ROBOT_DEFECT_NAMES),
        target_size_bytes=_size(size), width=width, height=height, robots=robots,
        episodes_per_session=episodes_per_session, preset=preset, crf=crf, flavor=flavor,
        pixel_encoding=pixel_encoding, footage=None if footage is None else str(footage),
    )  # fmt: skip
    _run("robot", out, values, jobs or _default_jobs())


@app.command()
def video(
    out: _Out,
    clips: Annotated[int, typer.Option(help="Clean clips (at least; --size may add more).")] = 3,
    seconds: Annotated[float, typer.Option(help="Length of each clip.")] = 2.0,
    fps: Annotated[float, typer.Option(help="Frame rate (29.97 is kept as 30000/1001).")] = 30.0,
    seed: _Seed = 0,
    defect: Annotated[
        list[str] | None,
        typer.Option(help=f"Add one file with this defect (repeatable): {', '.join(VIDEO_DEFECT_NAMES)}."),
    ] = None,
    size: _Size = None,
    width: Annotated[int, typer.Option(help="Frame width (multiple of 8).")] = 320,
    height: Annotated[int, typer.Option(help="Frame height (multiple of 8).")] = 240,
    scene_cuts: Annotated[int, typer.Option(help="Hard scene cuts per clip.")] = 2,
    preset: Annotated[str, typer.Option(help="x264 preset.")] = "veryfast",
    crf: _Crf = 23,
    sidecars: Annotated[bool, typer.Option(help="Write `<clip>.meta.json` beside each clip.")] = True,
    colour: Annotated[
        str, typer.Option(help="bt601 (untagged, as SD cameras) or bt709 (tagged, as HD cameras and phones).")
    ] = "bt601",
    jobs: _Jobs = None,
) -> None:
    """Write MP4 (H.264) vendor clips with the frame index drawn in into OUT."""
    values = dict(
        clips=clips, seconds=seconds, fps=fps, seed=seed, defects=_defects(defect, VIDEO_DEFECT_NAMES),
        target_size_bytes=_size(size), width=width, height=height, scene_cuts=scene_cuts, preset=preset,
        crf=crf, sidecars=sidecars, colour=colour,
    )  # fmt: skip
    _run("video", out, values, jobs or _default_jobs())
