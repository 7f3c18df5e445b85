"""Fixtures of the quality-controls tests: the synthetic inputs of :mod:`quality_inputs`, made once."""

from __future__ import annotations

from pathlib import Path

import pytest
from quality_inputs import Inputs


@pytest.fixture(scope="session")
def inputs(tmp_path_factory: pytest.TempPathFactory, corpus_dir: Path) -> Inputs:
    return Inputs(tmp_path_factory.mktemp("quality-inputs"), corpus_dir)
