"""Every camera and state family through a run of the real scheduler, as ``sluice run`` triggers it.

Two vendors hold all the families, since a scheduled run costs a minute or two here: a ROS 2 one (CDR
``CompressedVideo`` H.264 and H.265, ``CompressedImage`` JPEG and PNG, raw ``Image``; ``JointState``,
``PoseStamped``, ``Float64MultiArray``, ``TwistStamped`` and a vendor's own type read by field path) and a
Foxglove/JSON one (protobuf ``CompressedVideo`` H.264 and H.265, ``CompressedImage`` JPEG and PNG,
``RawImage``; JSON state and actions, a protobuf ``PoseInFrame``). Each episode carries one flavor, so each
vendor's cameras are optional and every episode must bring its own. The runs are triggered through the REST
API together and followed to their end; the assertions, per family, read the published episodes with the
stock reader and the ecosystem's own decoders (tests/families/family_helpers), never with pipeline code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from family_helpers import CAMERAS, mixed_contract, output_frames, source_stamps, write_family_drop
from mcap.reader import make_reader
from mcap_protobuf.decoder import DecoderFactory as ProtobufDecoders
from mcap_ros2.decoder import DecoderFactory as Ros2Decoders
from scheduler_harness import ScheduledVendor, SchedulerHarness, task_states

from pipeline.orchestrate.scheduled import ScheduledRun
from pipeline.synth.flavors import FLAVOR_NAMES, flavor
from pipeline.transcode.layout import NAMES_KEY, RESAMPLED_TIME_KEY, resampled_topic

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]

REPO = Path(__file__).resolve().parents[2]
ROS2_FLAVORS = tuple(n for n in FLAVOR_NAMES if flavor(n).ros2)
FOXGLOVE_FLAVORS = tuple(n for n in FLAVOR_NAMES if not flavor(n).ros2)
STEPS_RUN = ("ingest", "quality_pre", "transcode", "quality_post")
#: Annotate and shard read the transcoded episodes whatever their source family: off, to keep the runs short.
STEPS = {"annotate": {"enabled": False}, "shard": {"enabled": False}}


@dataclass(frozen=True)
class StateFamily:
    flavor: str
    topic: str
    field: str  # the resampled record's key

    @property
    def path(self) -> str:
        """Where the field sits in the source message, as its ROS or protobuf definition says."""
        return _SOURCE_PATHS[(self.flavor, self.topic)]


def _vector(decoded: Any, path: str) -> list[float]:
    value = decoded
    for part in path.split("."):
        value = getattr(value, part)
    if hasattr(value, "x"):  # a geometry Vector3 / Point
        return [float(value.x), float(value.y), float(value.z)]
    return [float(v) for v in np.atleast_1d(value)]


#: Where each family's resampled field sits in the source message (as the ROS/protobuf definitions say).
_SOURCE_PATHS = {
    ("ros2-jpeg", "/robot/joint_states"): "position",
    ("ros2-jpeg", "/robot/ee_pose"): "pose.position",
    ("ros2-jpeg", "/robot/joint_commands"): "data",
    ("ros2-jpeg", "/robot/ee_twist"): "twist.linear",
    ("ros2-jpeg", "/robot/gripper_command"): "position",
    ("foxglove-jpeg", "/robot/ee_pose"): "pose.position.x",
    ("default", "/robot/joint_states"): "position",
    ("default", "/robot/action"): "joint_targets",
}
STATE_FAMILIES = {
    "JointState": StateFamily("ros2-jpeg", "/robot/joint_states", "position"),
    "PoseStamped": StateFamily("ros2-jpeg", "/robot/ee_pose", "position"),
    "Float64MultiArray": StateFamily("ros2-jpeg", "/robot/joint_commands", "data"),
    "TwistStamped": StateFamily("ros2-jpeg", "/robot/ee_twist", "linear"),
    "own type by field path": StateFamily("ros2-jpeg", "/robot/gripper_command", "position"),
    "protobuf PoseInFrame": StateFamily("foxglove-jpeg", "/robot/ee_pose", "pose.position.x"),
    "JSON state": StateFamily("default", "/robot/joint_states", "position"),
    "JSON actions": StateFamily("default", "/robot/action", "joint_targets"),
}


class FamilyRuns:
    def __init__(self) -> None:
        self.vendors: dict[str, ScheduledVendor] = {}
        self.runs: dict[str, ScheduledRun] = {}
        self.paths: dict[str, tuple[str, str]] = {}  # flavor -> (vendor, episode path in its drop)

    def episode(self, name: str) -> tuple[ScheduledVendor, Path, Path]:
        """The vendor, source file and published transcoded episode of a flavor's episode."""
        vendor_name, rel = self.paths[name]
        vendor = self.vendors[vendor_name]
        rows = vendor.catalog(
            "SELECT e.state, a.uri FROM episodes e JOIN source_files f ON f.id = e.source_file_id "
            "JOIN vendors v ON v.id = e.vendor_id LEFT JOIN artifacts a ON a.episode_id = e.id "
            "AND a.kind = 'transcoded_episode' WHERE v.name = :vendor AND f.path = :path",
            path=rel,
        )
        assert len(rows) == 1, rows
        state, uri = rows[0]
        assert state == "accepted", (name, state)
        assert uri, f"{name}: no transcoded episode"
        return vendor, vendor.drop / rel, Path(uri.removeprefix("file://"))


@pytest.fixture(scope="module")
def family_runs(scheduler: SchedulerHarness) -> Iterator[FamilyRuns]:
    acme = yaml.safe_load((REPO / "dags" / "vendors" / "acme_robotics.yaml").read_text())
    kestrel = yaml.safe_load((REPO / "dags" / "vendors" / "kestrel_ros2.yaml").read_text())
    out = FamilyRuns()
    plans = {
        # The ROS 2 fleet's calibrations come from the sidecar only, as Kestrel's do.
        "sched_ros2_families": (ROS2_FLAVORS, kestrel["calibration"]),
        "sched_foxglove_families": (FOXGLOVE_FLAVORS, acme["calibration"]),
    }
    for name, (names, calibration) in plans.items():
        written: dict[str, str] = {}

        def make_drop(drop: Path, names: tuple[str, ...] = names, written: dict[str, str] = written) -> None:
            written.update(write_family_drop(drop, names))

        topics = {**acme["topics"], **mixed_contract(names)}
        vendor = scheduler.add_vendor(
            name,
            steps=STEPS,
            batches=1,
            make_drop=make_drop,
            overrides={"topics": topics, "calibration": calibration},
        )
        out.vendors[name] = vendor
        out.paths.update({f: (name, rel) for f, rel in written.items()})
    run_ids = {name: scheduler.trigger(vendor) for name, vendor in out.vendors.items()}
    for name, run_id in run_ids.items():
        out.runs[name] = scheduler.follow(out.vendors[name], run_id)
    yield out


def test_both_family_vendors_run_every_step_through_the_scheduler(family_runs: FamilyRuns) -> None:
    for name, run in family_runs.runs.items():
        assert run.state == "success", (name, run.failures, run.failed_items)
        states = task_states(run)
        for step in STEPS_RUN:
            assert states[(step, 0)] == "success", (name, step)
        assert states[("annotate", 0)] == "skipped"
        (outcome,) = family_runs.vendors[name].catalog(
            "SELECT r.outcome FROM pipeline_runs r JOIN vendors v ON v.id = r.vendor_id WHERE v.name = :vendor"
        )
        assert outcome == ("succeeded",)
    assert sorted(family_runs.paths) == sorted(FLAVOR_NAMES)


@pytest.mark.parametrize("name", FLAVOR_NAMES)
def test_each_camera_family_comes_out_as_h264_with_every_drawn_frame_at_its_source_stamp(
    family_runs: FamilyRuns, name: str
) -> None:
    _, source, out = family_runs.episode(name)
    shape = flavor(name)
    for camera in CAMERAS:
        topic = shape.camera_topic(camera)
        stamps = source_stamps(source, topic)
        frames = output_frames(out, topic)  # decoded as Foxglove decodes CompressedVideo
        assert len(stamps) >= 30 and len(frames) == len(stamps), camera
        assert sorted(index for _, index in frames) == list(range(len(stamps))), camera
        assert [stamp for stamp, _ in frames] == [stamps[index] for _, index in frames], camera


def _source_series(path: Path, family: StateFamily) -> tuple[np.ndarray, np.ndarray]:
    stamps, values = [], []
    with open(path, "rb") as fh:
        reader = make_reader(fh, decoder_factories=[Ros2Decoders(), ProtobufDecoders()])
        if family.flavor == "default":  # JSON records with an integer stamp_ns
            for _, _, message in reader.iter_messages(topics=[family.topic]):
                record = json.loads(message.data)
                stamps.append(int(record["stamp_ns"]))
                values.append([float(v) for v in np.atleast_1d(record[family.path])])
        else:
            for _, _, message, decoded in reader.iter_decoded_messages(topics=[family.topic]):
                stamps.append(_stamp_of(decoded, message.log_time))
                values.append(_vector(decoded, family.path))
    order = np.argsort(stamps, kind="stable")
    return np.asarray(stamps, dtype=np.int64)[order], np.asarray(values, dtype=float)[order]


def _stamp_of(decoded: Any, log_time_ns: int) -> int:
    if hasattr(decoded, "header"):
        return int(decoded.header.stamp.sec) * 1_000_000_000 + int(decoded.header.stamp.nanosec)
    if hasattr(decoded, "timestamp"):  # foxglove protobuf
        return int(decoded.timestamp.ToNanoseconds())
    return log_time_ns  # Float64MultiArray has no header: its log time is its stamp


def _resampled(out: Path, topic: str, field: str) -> tuple[dict[str, str], list[tuple[int, list[float]]]]:
    with open(out, "rb") as fh:
        reader = make_reader(fh)
        summary = reader.get_summary()
        assert summary is not None
        (channel,) = (c for c in summary.channels.values() if c.topic == resampled_topic(topic))
        records = []
        for _, _, message in reader.iter_messages(topics=[channel.topic]):
            record = json.loads(message.data)
            time = record[RESAMPLED_TIME_KEY]
            stamp = int(time["sec"]) * 1_000_000_000 + int(time["nsec"])
            assert stamp == message.log_time
            records.append((stamp, [float(v) for v in np.atleast_1d(record[field])]))
    return dict(channel.metadata), records


@pytest.mark.parametrize("family", list(STATE_FAMILIES), ids=list(STATE_FAMILIES))
def test_each_state_family_is_resampled_to_its_source_values_at_their_stamps(
    family_runs: FamilyRuns, family: str
) -> None:
    """Every resampled record equals the source interpolated at its time, with the source's own stamps (a
    header read wrongly, or log time taken for the stamp, moves the values by the transport delay)."""
    spec = STATE_FAMILIES[family]
    _, source, out = family_runs.episode(spec.flavor)
    metadata, records = _resampled(out, spec.topic, spec.field)
    assert float(metadata["sluice.resample_rate_hz"]) == 50.0
    if spec.topic == "/robot/joint_states" and spec.flavor.startswith("ros2"):
        assert json.loads(metadata[NAMES_KEY])[-1] == "gripper"
    methods = json.loads(metadata["sluice.interpolation"])
    assert methods[spec.field] == "linear"
    stamps, values = _source_series(source, spec)
    inside = [(t, v) for t, v in records if stamps[0] <= t <= stamps[-1]]
    assert len(inside) >= 50, len(inside)  # a second and more on the 50 Hz grid
    grid = np.asarray([t for t, _ in inside], dtype=np.int64)
    assert np.all(np.diff(grid) == 20_000_000)
    got = np.asarray([v for _, v in inside])
    relative = (grid - stamps[0]).astype(float)
    expected = np.stack(
        [
            np.interp(relative, (stamps - stamps[0]).astype(float), values[:, k])
            for k in range(values.shape[1])
        ],
        axis=1,
    )
    np.testing.assert_allclose(got, expected, atol=1e-6)
