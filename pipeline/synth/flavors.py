"""Synthetic robot logs in the message shapes real fleets record: a *flavor* picks the cameras' message
family and picture format, and the state and action types.

* ``default``: today's layout (TOPICS.md): ``foxglove.CompressedVideo`` H.264 in protobuf, JSON state and
  actions. ``foxglove-*`` flavors keep the JSON state and actions, add an end-effector pose as a protobuf
  ``foxglove.PoseInFrame`` and carry the cameras as Foxglove's protobuf CompressedVideo (``h265``),
  CompressedImage (``jpeg``, ``png``) or RawImage (``raw``).
* ``ros2-*`` flavors are what rosbag2 writes: everything CDR with ``ros2msg`` schemas, cameras as
  ``sensor_msgs/msg/CompressedImage`` (``jpeg``, ``png``), ``sensor_msgs/msg/Image`` (``raw``, any pixel
  encoding of :data:`~pipeline.synth.encode.RAW_ENCODINGS`) or ``foxglove_msgs/msg/CompressedVideo``
  (``h264``, ``h265``); state as ``sensor_msgs/msg/JointState`` (joints by name) and a
  ``geometry_msgs/msg/PoseStamped``; actions as ``std_msgs/msg/Float64MultiArray`` joint commands, a
  ``geometry_msgs/msg/TwistStamped`` and a vendor's own ``acme_msgs/msg/GripperCommand``.

Every picture carries the frame index drawn into its pixels, as in the default flavor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from pipeline.errors import UnknownChoiceError
from pipeline.synth import layout
from pipeline.synth import ros2 as msgs

CameraKind = Literal["video", "image", "raw"]


@dataclass(frozen=True)
class Flavor:
    """One shape of robot log: the cameras' envelope and picture format, the state and action types."""

    name: str
    ros2: bool  # CDR everywhere (rosbag2); otherwise protobuf cameras and JSON state/actions
    camera: CameraKind
    format: str  # h264 | h265 | jpeg | png | raw

    @property
    def default(self) -> bool:
        return self.name == "default"

    def camera_topic(self, camera: str) -> str:
        if self.default:
            return layout.camera_topic(camera)
        suffix = {
            "video": self.format,
            "image": "image_raw/compressed" if self.ros2 else "compressed",
            "raw": "image_raw" if self.ros2 else "raw",
        }[self.camera]
        return f"/cam/{camera}/{suffix}"

    def camera_schema(self) -> str:
        """The schema name of the cameras' messages."""
        if self.ros2:
            return {"video": msgs.COMPRESSED_VIDEO, "image": msgs.COMPRESSED_IMAGE, "raw": msgs.IMAGE}[
                self.camera
            ]
        return {
            "video": "foxglove.CompressedVideo",
            "image": "foxglove.CompressedImage",
            "raw": "foxglove.RawImage",
        }[self.camera]

    @property
    def state_topics(self) -> tuple[str, ...]:
        if self.ros2:
            return (layout.JOINT_STATE_TOPIC, EE_POSE_TOPIC)
        return (layout.JOINT_STATE_TOPIC,) if self.default else (layout.JOINT_STATE_TOPIC, EE_POSE_TOPIC)

    @property
    def action_topics(self) -> tuple[str, ...]:
        if self.ros2:
            return (JOINT_COMMAND_TOPIC, EE_TWIST_TOPIC, GRIPPER_COMMAND_TOPIC)
        return (layout.ACTION_TOPIC,)


def _flavors() -> dict[str, Flavor]:
    out = {"default": Flavor("default", False, "video", "h264")}
    for fmt, kind in (("h265", "video"), ("jpeg", "image"), ("png", "image"), ("raw", "raw")):
        out[f"foxglove-{fmt}"] = Flavor(f"foxglove-{fmt}", False, kind, fmt)  # type: ignore[arg-type]
    for fmt, kind in (
        ("h264", "video"),
        ("h265", "video"),
        ("jpeg", "image"),
        ("png", "image"),
        ("raw", "raw"),
    ):
        out[f"ros2-{fmt}"] = Flavor(f"ros2-{fmt}", True, kind, fmt)  # type: ignore[arg-type]
    return out


FLAVORS: dict[str, Flavor] = _flavors()
FLAVOR_NAMES: tuple[str, ...] = tuple(FLAVORS)


def flavor(name: str) -> Flavor:
    if name not in FLAVORS:
        raise UnknownChoiceError("robot log flavor", name, FLAVORS)
    return FLAVORS[name]


def matching_flavor(cameras: Sequence[Any]) -> str:
    """The flavor whose cameras a vendor contract describes (topics, schema names, formats), so that the
    demo can make each example vendor a drop it accepts; ``default`` when none matches."""
    for shape in FLAVORS.values():
        if cameras and all(
            c.topic == shape.camera_topic(c.name)
            and (not c.schema_names or shape.camera_schema() in c.schema_names)
            and (shape.camera == "raw" or shape.format in c.formats)
            for c in cameras
        ):
            return shape.name
    return "default"


# -- the extra streams of the non-default flavors ------------------------------------------------------------

EE_POSE_TOPIC = "/robot/ee_pose"
JOINT_COMMAND_TOPIC = "/robot/joint_commands"
EE_TWIST_TOPIC = "/robot/ee_twist"
GRIPPER_COMMAND_TOPIC = "/robot/gripper_command"
EE_POSE_RATE_HZ = 100.0
EE_TWIST_RATE_HZ = 50.0
GRIPPER_COMMAND_RATE_HZ = 10.0
#: The ROS flavors' joint names: seven arm joints, then the gripper's finger joint.
JOINT_NAMES: tuple[str, ...] = (*(f"joint_{k + 1}" for k in range(layout.JOINT_COUNT)), "gripper")
#: The name ``renamed_joints`` gives ``joint_3`` halfway through an episode (a driver update mid-session).
RENAMED_JOINT = ("joint_3", "elbow")
#: The gripper's force limit in every command, N.
GRIPPER_MAX_EFFORT_N = 40.0
BASE_FRAME = "base_link"


def ee_pose(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A smooth end-effector position (m) and orientation (unit quaternion x, y, z, w) from joint angles."""
    position = np.stack(
        [0.45 + 0.12 * np.sin(pos[:, 0]), 0.12 * np.sin(pos[:, 1]), 0.30 + 0.10 * np.cos(pos[:, 2])], axis=1
    )
    half = pos[:, 3] / 2
    zeros = np.zeros_like(half)
    orientation = np.stack([zeros, zeros, np.sin(half), np.cos(half)], axis=1)
    return np.round(position, 6), np.round(orientation, 6)


# A series message on its way: (index in stream) -> payload (bytes, or a dict for the CDR encoder).
PayloadFn = Callable[[int], Any]


def ros2_joint_state(stamps: np.ndarray, pos: np.ndarray, vel: np.ndarray, effort: np.ndarray,
                     gripper: np.ndarray, rename_from: int | None) -> PayloadFn:  # fmt: skip
    names_after = tuple(RENAMED_JOINT[1] if n == RENAMED_JOINT[0] else n for n in JOINT_NAMES)

    def make(i: int) -> dict[str, Any]:
        names = names_after if rename_from is not None and i >= rename_from else JOINT_NAMES
        return {
            "header": msgs.header(int(stamps[i]), BASE_FRAME),
            "name": list(names),
            "position": [*pos[i].tolist(), float(gripper[i])],
            "velocity": [*vel[i].tolist(), 0.0],
            "effort": [*effort[i].tolist(), 0.0],
        }

    return make


def ros2_pose(stamps: np.ndarray, pos: np.ndarray) -> PayloadFn:
    position, orientation = ee_pose(pos)

    def make(i: int) -> dict[str, Any]:
        x, y, z = position[i].tolist()
        qx, qy, qz, qw = orientation[i].tolist()
        return {
            "header": msgs.header(int(stamps[i]), BASE_FRAME),
            "pose": {
                "position": {"x": x, "y": y, "z": z},
                "orientation": {"x": qx, "y": qy, "z": qz, "w": qw},
            },
        }

    return make


def ros2_joint_command(targets: np.ndarray, grip: np.ndarray) -> PayloadFn:
    def make(i: int) -> dict[str, Any]:
        return {"layout": {"dim": [], "data_offset": 0}, "data": [*targets[i].tolist(), float(grip[i])]}

    return make


def ros2_twist(stamps: np.ndarray, vel: np.ndarray) -> PayloadFn:
    linear = np.round(0.1 * vel[:, :3], 6)
    angular = np.round(vel[:, 3], 6)

    def make(i: int) -> dict[str, Any]:
        x, y, z = linear[i].tolist()
        return {
            "header": msgs.header(int(stamps[i]), BASE_FRAME),
            "twist": {
                "linear": {"x": x, "y": y, "z": z},
                "angular": {"x": 0.0, "y": 0.0, "z": float(angular[i])},
            },
        }

    return make


def ros2_gripper(stamps: np.ndarray, grip: np.ndarray) -> PayloadFn:
    def make(i: int) -> dict[str, Any]:
        return {
            "header": msgs.header(int(stamps[i]), BASE_FRAME),
            "position": float(grip[i]),
            "max_effort": GRIPPER_MAX_EFFORT_N,
        }

    return make


def foxglove_pose(stamps: np.ndarray, pos: np.ndarray) -> PayloadFn:
    from foxglove_schemas_protobuf.PoseInFrame_pb2 import PoseInFrame

    from pipeline.synth.calibration import proto_timestamp

    position, orientation = ee_pose(pos)

    def make(i: int) -> bytes:
        msg = PoseInFrame(timestamp=proto_timestamp(int(stamps[i])), frame_id=BASE_FRAME)
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = position[i].tolist()
        o = msg.pose.orientation
        o.x, o.y, o.z, o.w = orientation[i].tolist()
        return msg.SerializeToString()

    return make
