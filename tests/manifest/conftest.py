"""Small manifest tables for the format and loader tests."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from pipeline.manifest import format as mf

SPLITS = ("train", "train", "train", "val", "eval")


def make_table(rows: int, *, seed: int = 0, extra: bool = False) -> pa.Table:
    """A valid manifest of ``rows`` rows whose ids and values identify each row."""
    episode_ids = [f"ep-{seed:03d}-{i:07d}" for i in range(rows)]
    starts = [1_700_000_000_000_000_000 + i * 60_000_000_000 for i in range(rows)]
    durations_ns = [5_000_000_000 + (i % 7) * 1_000_000_000 for i in range(rows)]
    data: dict[str, object] = {
        mf.EPISODE_ID: episode_ids,
        mf.URI: [f"file:///store/derived/transcode/cfg/{e}/episode.mcap" for e in episode_ids],
        mf.START_NS: starts,
        mf.END_NS: [s + d for s, d in zip(starts, durations_ns, strict=True)],
        mf.DURATION_S: [d / 1e9 for d in durations_ns],
        mf.VENDOR: [("acme", "bluefield", "cobalt")[i % 3] for i in range(rows)],
    }
    for k, name in enumerate(mf.QUALITY_SCORE_COLUMNS):
        data[name] = pa.array(
            [None if (i + k) % 11 == 0 else ((i * (k + 3)) % 100) / 100 for i in range(rows)], pa.float32()
        )
    data[mf.SPLIT] = [SPLITS[i % len(SPLITS)] for i in range(rows)]
    data[mf.SOURCE_SHA256] = [f"{(i // 3 + seed * 1_000_003):064x}" for i in range(rows)]
    if extra:
        data["robot"] = [f"robot-{i % 4}" for i in range(rows)]
        data["tags"] = pa.array([[f"t{i % 5}"] * (i % 3) for i in range(rows)], pa.list_(pa.string()))
    return pa.table(data)


@pytest.fixture
def manifest_table() -> Callable[..., pa.Table]:
    return make_table
