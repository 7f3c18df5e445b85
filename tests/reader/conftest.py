"""One synthetic episode, transcoded under each profile once per session; the loader tests' episode."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from reader_helpers import make_episode


@pytest.fixture(scope="session")
def episode(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("reader")
    cache: dict[str, tuple[Path, Path]] = {}

    def get(profile: str) -> tuple[Path, Path]:
        if profile not in cache:
            cache[profile] = make_episode(folder, profile)
        return cache[profile]

    return get


#: The loader tests' profile: short GOPs, so that a sample decodes few frames and the tests stay fast.
LOADER_PROFILE = "random_access"


@pytest.fixture
def path(episode: Callable[[str], tuple[Path, Path]]) -> Path:
    """The loader tests' transcoded episode."""
    return episode(LOADER_PROFILE)[1]


@pytest.fixture
def span(path: Path) -> tuple[int, int]:
    """The episode's first and last frame stamps."""
    from pipeline.reader import open_episode

    with open_episode(path) as reader:
        return reader.start_ns, reader.end_ns
