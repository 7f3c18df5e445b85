"""Helpers for the orchestration tests (a module of its own: test modules cannot import a conftest by name)."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import VendorConfig, load_vendor

VENDOR = """\
name: tiny_vendor
kind: mcap
description: Five small files, planned into two batches.
source: {{url: {drop}, include: ['*.mcap'], settle_s: 0}}
topics: {{}}
planner: {{min_splits: 2, max_splits: 2, batch_stagger_s: {stagger}}}
"""


def write_vendor(folder: Path, drop: Path, *, stagger_s: float = 0.0) -> VendorConfig:
    path = folder / "tiny_vendor.yaml"
    path.write_text(VENDOR.format(drop=drop, stagger=stagger_s))
    return load_vendor(path)
