"""Config hashes: stable across formatting, sensitive to every value, and scoped per step."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pipeline.config import (
    STEP_READS,
    VendorConfig,
    config_hash,
    load_vendor,
    step_config_hash,
    step_config_hashes,
)
from pipeline.enums import StepName

REFORMATTED = """\
# the same vendor, written differently
topics: {state: [{message_encodings: [json], rate_hz: 200.0, topic: /robot/joint_states}]}   # flow style
source:
    url: "{root}"          # quoted, deeper indent
kind: 'mcap'
name: tiny
steps: {}
transcode: {profile: vla, gop_frames: 10}   # the profile's own defaults, written out
"""


def test_hash_ignores_key_order_comments_quoting_and_explicit_defaults(write_vendor, tiny: str) -> None:
    plain = load_vendor(write_vendor(tiny))
    reformatted = load_vendor(write_vendor(REFORMATTED))
    assert plain == reformatted
    assert config_hash(plain) == config_hash(reformatted)
    assert len(config_hash(plain)) == 64


def test_allow_lists_are_sets(write_vendor, tiny: str) -> None:
    one = load_vendor(write_vendor(tiny + "  compressions: [zstd, lz4]\n"))
    other = load_vendor(write_vendor(tiny + "  compressions: [lz4, zstd, lz4]\n"))
    assert config_hash(one) == config_hash(other)


def _leaves(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    if isinstance(data, dict):
        return [leaf for key, value in data.items() for leaf in _leaves(value, (*path, key))]
    if isinstance(data, list):
        return [leaf for index, value in enumerate(data) for leaf in _leaves(value, (*path, index))]
    return [(path, data)]


def _mutations(value: Any) -> list[Any]:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1, value * 2]
    if isinstance(value, float):
        return [value + 0.5, value / 2]
    if isinstance(value, str):
        words = [
            "lz4",
            "none",
            "zstd",
            "log_time",
            "hardware",
            "cbor",
            "mov",
            "h265",
            "topics",
            "world_model",
        ]
        return [value + "x", value[:-1] + "y", *words, "medium", "cost", "@daily", "io", "gpu"]
    return []


def test_every_value_change_changes_the_hash(vendors_dir: Path) -> None:
    base = load_vendor(vendors_dir / "acme_robotics.yaml")
    dumped = base.model_dump(mode="json")
    base_hash = config_hash(base)
    changed = 0
    unchanged = []
    for path, value in _leaves(dumped):
        for candidate in _mutations(value):
            data = copy.deepcopy(dumped)
            target = data
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = candidate
            try:
                mutated = VendorConfig.model_validate(data)
            except ValidationError:
                continue
            if mutated.model_dump(mode="json") == dumped:
                continue  # e.g. an allow-list already holding the candidate
            changed += 1
            if config_hash(mutated) == base_hash:
                unchanged.append(path)
            break
    assert unchanged == []
    assert changed >= 100  # nearly every leaf of the resolved config was exercised


def test_step_hashes_cover_only_what_each_step_reads(write_vendor, tiny: str) -> None:
    base = step_config_hashes(load_vendor(write_vendor(tiny)))

    def changed_steps(extra: str) -> set[StepName]:
        other = step_config_hashes(load_vendor(write_vendor(tiny + extra)))
        return {step for step in StepName if other[step] != base[step]}

    assert changed_steps("annotate:\n  annotators:\n    motion_energy: {version: '2'}\n") == {
        StepName.ANNOTATE
    }
    assert changed_steps("transcode:\n  gop_frames: 12\n") == {StepName.TRANSCODE, StepName.QUALITY_POST}
    assert changed_steps("quality:\n  pre: {max_gap_rate: 0.05}\n") == {StepName.QUALITY_PRE}
    assert changed_steps("shard:\n  target_shard_bytes: 128 MiB\n") == {StepName.SHARD}
    assert changed_steps("timestamps:\n  truth: log_time\n") == {StepName.QUALITY_PRE, StepName.TRANSCODE}
    assert changed_steps("timestamps:\n  max_skew_s: 0.1\n") == {StepName.QUALITY_PRE}
    # Orchestration is nobody's input: resources, pools, schedule, planner change no step hash...
    orchestration = (
        "steps:\n  transcode: {resources: {cpus: 4}}\nschedule: {cron: '@daily'}\nplanner: {max_splits: 4}\n"
    )
    assert changed_steps(orchestration) == set()
    # ...but they do change the whole-config hash.
    assert config_hash(load_vendor(write_vendor(tiny + orchestration))) != config_hash(
        load_vendor(write_vendor(tiny))
    )


def test_step_reads_name_real_fields(vendors_dir: Path) -> None:
    vendor = load_vendor(vendors_dir / "northwind_video.yaml")
    assert set(STEP_READS) == set(StepName)
    for step in StepName:  # a typo in STEP_READS raises KeyError here
        assert len(step_config_hash(vendor, step)) == 64
    assert len(set(step_config_hashes(vendor).values())) == len(StepName)
