"""What the cluster test modules share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import s3fs
import yaml

from pipeline.synth import DropManifest, RobotDropConfig, make_robot_drop

REPO = Path(__file__).resolve().parents[2]


def opt_in(what: str) -> pytest.MarkDecorator:
    """Skip unless ``make test-cluster`` (``SLUICE_TEST_CLUSTER=1``) asked for the tests that start ``what``."""
    return pytest.mark.skipif(
        not os.environ.get("SLUICE_TEST_CLUSTER"),
        reason=f"`make test-cluster` (SLUICE_TEST_CLUSTER=1) {what}",
    )


def s3_robot_vendor(tmp_path: Path, drop: RobotDropConfig) -> tuple[DropManifest, Path]:
    """A robot drop uploaded to ``s3://sluice-drops/acme`` and the example robot vendor's file pointed at it
    (under ``tmp_path/vendors``): the drop's manifest and the vendor file."""
    local = tmp_path / "drop"
    manifest = make_robot_drop(local, drop)
    s3fs.S3FileSystem().put(str(local) + "/", "sluice-drops/acme/", recursive=True)
    return manifest, robot_vendor_file(tmp_path, "s3://sluice-drops/acme", min_splits=2)


def robot_vendor_file(tmp_path: Path, url: str, **planner: object) -> Path:
    """The example robot vendor's file with its source at ``url`` (no settle time, no stagger, ``planner``
    overrides), written as ``tmp_path/vendors/acme_robotics.yaml``."""
    data = yaml.safe_load((REPO / "dags" / "vendors" / "acme_robotics.yaml").read_text())
    data["source"] |= {"url": url, "settle_s": 0}
    data["planner"] |= {"batch_stagger_s": 0, **planner}
    vendor_file = tmp_path / "vendors" / "acme_robotics.yaml"
    vendor_file.parent.mkdir()
    vendor_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return vendor_file
