"""A tiny synthetic robot episode transcoded per profile, for the sample reader's tests."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import TrainingProfile
from pipeline.synth.calibration import make_calibration
from pipeline.synth.robot import EpisodeMedia, EpisodeSpec, write_episode
from pipeline.transcode import Provenance, RobotTranscodeConfig, transcode_episode
from pipeline.transcode.source import read_source

# The same contract and profile defaults as the acme_robotics example vendor.
WIDTH, HEIGHT, SECONDS = 128, 96, 3.0
START_NS = 1_748_851_200_000_000_000
PROVENANCE = Provenance(source_sha256="ab" * 32, config_hash="cd" * 32, code_version="test")


def robot_config(profile: str) -> RobotTranscodeConfig:
    from pipeline.bench.read import robot_config as bench_config

    return bench_config(TrainingProfile(profile))


def make_episode(folder: Path, profile: str) -> tuple[Path, Path]:
    """(source, transcoded) paths of a 3 s, 128x96 episode under ``profile``."""
    source = folder / "source.mcap"
    if not source.exists():
        calibration = make_calibration(0, 0, "rb01", 0, WIDTH, HEIGHT)
        spec = EpisodeSpec("rb01", "s", "e", "task", "op", START_NS, SECONDS, 11, calibration)
        write_episode(source, spec, EpisodeMedia(width=WIDTH, height=HEIGHT))
    out = folder / profile / "episode.mcap"
    transcode_episode(source, out, robot_config(profile), PROVENANCE)
    return source, out


def source_stamps(source: Path, profile: str) -> dict[str, list[int]]:
    config = robot_config(profile)
    return {c.name: list(c.stamps_ns) for c in read_source(source, config.contract, config.truth).cameras}
