"""The example vendors load, match the shared synthetic layout, and carry sensible step defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import (
    STEP_DEFAULTS,
    StampSource,
    StepsConfig,
    TrainingProfile,
    VendorConfig,
    generic_vendor,
    load_vendor,
    load_vendors,
)
from pipeline.discover import selected
from pipeline.enums import SourceKind, StepName


def test_every_example_vendor_loads(vendors_dir: Path) -> None:
    loaded = load_vendors(vendors_dir)
    assert set(loaded) >= {"acme_robotics", "northwind_video"}
    broken = {name: str(result) for name, result in loaded.items() if not isinstance(result, VendorConfig)}
    assert broken == {}


def test_acme_matches_the_synthetic_robot_log_layout(vendors_dir: Path) -> None:
    acme = load_vendor(vendors_dir / "acme_robotics.yaml")
    assert acme.kind is SourceKind.MCAP
    assert acme.topics is not None and acme.video is None
    cameras = {c.name: (c.topic, c.rate_hz, c.message_encodings, c.schema_names) for c in acme.topics.cameras}
    assert cameras == {
        name: (f"/cam/{name}/h264", 30.0, ("protobuf",), ("foxglove.CompressedVideo",))
        for name in ("front", "wrist_left", "wrist_right")
    }
    (state,) = acme.topics.state
    (action,) = acme.topics.actions
    assert (state.topic, state.rate_hz, state.message_encodings, state.stamp_field) == (
        "/robot/joint_states",
        200.0,
        ("json",),
        "stamp_ns",
    )
    assert (action.topic, action.rate_hz, action.schema_names) == ("/robot/action", 50.0, ("sluice.Action",))
    assert acme.calibration.sidecar_path == "calibrations.json"
    assert acme.calibration.topics == tuple(
        f"/cam/{n}/calibration" for n in ("front", "wrist_left", "wrist_right")
    )
    assert acme.timestamps.truth is StampSource.HARDWARE
    # The unknown-encoding defect must be quarantined: only the two real encodings are allowed.
    assert acme.topics.message_encodings == ("json", "protobuf")


def test_northwind_is_a_video_vendor_with_kind_defaults(vendors_dir: Path) -> None:
    northwind = load_vendor(vendors_dir / "northwind_video.yaml")
    assert northwind.kind is SourceKind.VIDEO
    assert northwind.topics is None and northwind.video is not None
    assert northwind.video.containers == ("mov", "mp4")
    assert northwind.timestamps.truth is StampSource.CONTAINER
    assert northwind.transcode.profile is TrainingProfile.WORLD_MODEL
    # Filled from the profile: long GOP, no B-frames; clips filled from the kind.
    assert (northwind.transcode.gop_frames, northwind.transcode.bframes) == (120, 0)
    assert northwind.transcode.clips is not None
    assert northwind.transcode.resample_rate_hz is None


def test_relative_source_resolves_against_the_base_dir(vendors_dir: Path, tmp_path: Path) -> None:
    acme = load_vendor(vendors_dir / "acme_robotics.yaml", base_dir=tmp_path)
    assert acme.source.url == ".sluice/drops/acme_robotics"  # stored as written: the hash is portable
    assert acme.source_url(tmp_path) == str(tmp_path / ".sluice" / "drops" / "acme_robotics")


def test_step_defaults_follow_the_design(vendors_dir: Path) -> None:
    steps = StepsConfig()
    assert [step for step, _ in steps.items()] == list(StepName)
    assert set(StepsConfig.model_fields) == {step.value for step in StepName} == set(STEP_DEFAULTS)
    assert steps[StepName.TRANSCODE].critical and steps[StepName.TRANSCODE].enabled
    assert not steps[StepName.ANNOTATE].enabled and not steps[StepName.ANNOTATE].critical
    assert not steps[StepName.SHARD].critical
    assert all(config.resources.memory_bytes > 0 for _, config in steps.items())


def test_a_partial_step_override_keeps_the_step_specific_defaults(write_vendor, tiny: str) -> None:
    vendor = load_vendor(write_vendor(tiny + "steps:\n  transcode:\n    resources: {cpus: 3}\n"))
    transcode = vendor.steps[StepName.TRANSCODE]
    assert transcode.resources.cpus == 3.0
    # Everything else is transcode's own default, not a generic one.
    expected = STEP_DEFAULTS[StepName.TRANSCODE]
    assert transcode.critical is expected["critical"]
    assert transcode.pool_slots == expected["pool_slots"]
    assert transcode.resources.memory_bytes == expected["resources"]["memory_bytes"]


@pytest.mark.parametrize(
    ("profile", "gop_frames", "bframes", "rate"),
    [
        ("vla", 10, 0, ("crf", 23)),
        ("world_model", 120, 0, ("crf", 23)),
        ("random_access", 17, 16, ("qp", 26)),
    ],
)
def test_profiles_fill_their_encoder_settings(
    write_vendor, tiny: str, profile: str, gop_frames: int, bframes: int, rate: tuple[str, int]
) -> None:
    vendor = load_vendor(write_vendor(tiny + f"transcode:\n  profile: {profile}\n"))
    assert (vendor.transcode.gop_frames, vendor.transcode.bframes) == (gop_frames, bframes)
    assert getattr(vendor.transcode, rate[0]) == rate[1]


def test_an_explicit_empty_contract_is_container_only(write_vendor) -> None:
    text = "name: tiny\nkind: mcap\nsource: {url: {root}}\ntopics: {message_encodings: null}\n"
    vendor = load_vendor(write_vendor(text))
    assert vendor.topics is not None
    assert vendor.topics.all_topics() == () and vendor.topics.message_encodings is None


@pytest.mark.parametrize("kind", ["mcap", "video"])
def test_generic_vendor_accepts_every_file_and_encoding(kind: str, tmp_path: Path) -> None:
    vendor = generic_vendor(kind, str(tmp_path))
    assert vendor.kind is SourceKind(kind) and vendor.source.include == ("**/*",)
    # ... but a drop's own sidecars are not inputs.
    for sidecar in ("drop.json", "batch_000/clip_00001.meta.json", "notes/README.md", ".DS_Store"):
        assert not selected(sidecar, vendor.source.include, vendor.source.exclude), sidecar
    assert selected("rb01/e000.mcap", vendor.source.include, vendor.source.exclude)
    if vendor.topics is not None:
        assert vendor.topics.message_encodings is None and vendor.topics.all_topics() == ()
    else:
        assert vendor.video is not None and {"webm", "mp4"} <= set(vendor.video.containers)


def test_the_ros2_example_vendor_describes_a_synthetic_flavor(vendors_dir: Path) -> None:
    """The demo makes each example vendor the drop its contract describes (JPEG cameras in CDR for the ROS 2
    vendor); a contract no flavor matches gets the default shape."""
    from pipeline.synth.flavors import matching_flavor

    def cameras(name: str) -> tuple:
        topics = load_vendor(vendors_dir / f"{name}.yaml").topics
        assert topics is not None
        return topics.cameras

    assert matching_flavor(cameras("kestrel_ros2")) == "ros2-jpeg"
    assert matching_flavor(cameras("acme_robotics")) == "default"
    kestrel = load_vendor(vendors_dir / "kestrel_ros2.yaml").topics
    assert kestrel is not None
    as_png = [c.model_copy(update={"formats": ("png",)}) for c in kestrel.cameras]
    assert matching_flavor(as_png) == "ros2-png"
    renamed = [c.model_copy(update={"topic": "/front/image"}) for c in kestrel.cameras]
    assert matching_flavor(renamed) == "default"
