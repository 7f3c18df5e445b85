"""One synthetic episode, transcoded under each profile once per session."""

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
