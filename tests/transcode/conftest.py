"""Tiny synthetic robot episodes and their transcodes, made once per session (128x96, 1.5 s)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from transcode_helpers import PROVENANCE, config_for, write_source

from pipeline.transcode import TranscodeResult, transcode_episode


@pytest.fixture(scope="session")
def source_episode(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_source(tmp_path_factory.mktemp("source") / "episode.mcap")


@pytest.fixture(scope="session")
def transcoded(
    source_episode: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], TranscodeResult]:
    """``transcoded(profile)``: the source episode transcoded under a profile's defaults (cached)."""
    cache: dict[str, TranscodeResult] = {}

    def get(profile: str) -> TranscodeResult:
        if profile not in cache:
            out = tmp_path_factory.mktemp(f"out_{profile}") / "episode.mcap"
            cache[profile] = transcode_episode(source_episode, out, config_for(profile), PROVENANCE)
        return cache[profile]

    return get
