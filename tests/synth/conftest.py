"""Tiny synthetic drops made once per session: every defect flag, small frames, a second or two of log."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.synth import (
    DropManifest,
    RobotDefect,
    RobotDropConfig,
    VideoDefect,
    VideoDropConfig,
    make_robot_drop,
    make_video_drop,
)
from pipeline.synth.defects import defect_applies

# 128x96 puts 8x8-pixel cells in the frame code; 32 KiB chunks give each episode several chunks to cut.
TINY_ROBOT = RobotDropConfig(
    episodes=2,
    seconds=1.5,
    robots=2,
    episodes_per_session=3,
    width=128,
    height=96,
    chunk_size_bytes=32 * 1024,
    defects=tuple(d for d in RobotDefect if defect_applies(d, "default")),
)
TINY_VIDEO = VideoDropConfig(
    clips=2, seconds=2.0, width=128, height=96, scene_cuts=2, defects=tuple(VideoDefect)
)


@pytest.fixture(scope="session")
def robot_drop(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DropManifest]:
    out = tmp_path_factory.mktemp("synth") / "robot"
    return out, make_robot_drop(out, TINY_ROBOT)


@pytest.fixture(scope="session")
def video_drop(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DropManifest]:
    out = tmp_path_factory.mktemp("synth") / "video"
    return out, make_video_drop(out, TINY_VIDEO)
