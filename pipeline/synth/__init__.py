"""Synthetic vendor drops: realistic, deterministic robot logs and videos, with one flag per defect.

Entry points: :func:`make_robot_drop` and :func:`make_video_drop` write a whole drop with its
``drop.json`` manifest; :func:`pipeline.synth.robot.write_episode` and :func:`pipeline.synth.video.write_clip`
write single files for tests; :mod:`pipeline.synth.mutate` damages finished files at chosen places.
"""

from pipeline.synth.config import RobotDropConfig, VideoDropConfig, build_config
from pipeline.synth.defects import EXPECTED_REASONS, RobotDefect, VideoDefect, expected_outcome
from pipeline.synth.drop import DropFile, DropManifest, parse_size, read_manifest
from pipeline.synth.generate import make_robot_drop, make_video_drop

__all__ = [
    "EXPECTED_REASONS",
    "DropFile",
    "DropManifest",
    "RobotDefect",
    "RobotDropConfig",
    "VideoDefect",
    "VideoDropConfig",
    "build_config",
    "expected_outcome",
    "make_robot_drop",
    "make_video_drop",
    "parse_size",
    "read_manifest",
]
