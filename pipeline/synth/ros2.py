"""ROS 2 message definitions of the synthetic ROS 2 flavors, in the concatenated form rosbag2 stores as an
MCAP schema (``ros2msg``: the type's fields, then each nested type after a line of ``=``).

The definitions are the fields of the standard interfaces (sensor_msgs, std_msgs, geometry_msgs and
foxglove_msgs), comments left out; ``acme_msgs/msg/GripperCommand`` is a vendor's own type, the kind a
contract picks fields from by path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

_SEPARATOR = "=" * 80

_TIME = "int32 sec\nuint32 nanosec\n"
_HEADER = "builtin_interfaces/Time stamp\nstring frame_id\n"
_POINT = "float64 x\nfloat64 y\nfloat64 z\n"
_QUATERNION = "float64 x\nfloat64 y\nfloat64 z\nfloat64 w\n"


def _concat(main: str, *nested: tuple[str, str]) -> str:
    parts = [main]
    for name, text in nested:
        parts.append(f"{_SEPARATOR}\nMSG: {name}\n{text}")
    return "\n".join(parts)


_HEADER_DEPS = (("std_msgs/Header", _HEADER), ("builtin_interfaces/Time", _TIME))

COMPRESSED_IMAGE: Final = "sensor_msgs/msg/CompressedImage"
IMAGE: Final = "sensor_msgs/msg/Image"
JOINT_STATE: Final = "sensor_msgs/msg/JointState"
FLOAT64_MULTI_ARRAY: Final = "std_msgs/msg/Float64MultiArray"
POSE_STAMPED: Final = "geometry_msgs/msg/PoseStamped"
TWIST_STAMPED: Final = "geometry_msgs/msg/TwistStamped"
COMPRESSED_VIDEO: Final = "foxglove_msgs/msg/CompressedVideo"
GRIPPER_COMMAND: Final = "acme_msgs/msg/GripperCommand"

MSGDEFS: Final[dict[str, str]] = {
    COMPRESSED_IMAGE: _concat("std_msgs/Header header\nstring format\nuint8[] data\n", *_HEADER_DEPS),
    IMAGE: _concat(
        "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\n"
        "uint32 step\nuint8[] data\n",
        *_HEADER_DEPS,
    ),
    JOINT_STATE: _concat(
        "std_msgs/Header header\nstring[] name\nfloat64[] position\nfloat64[] velocity\nfloat64[] effort\n",
        *_HEADER_DEPS,
    ),
    FLOAT64_MULTI_ARRAY: _concat(
        "std_msgs/MultiArrayLayout layout\nfloat64[] data\n",
        ("std_msgs/MultiArrayLayout", "std_msgs/MultiArrayDimension[] dim\nuint32 data_offset\n"),
        ("std_msgs/MultiArrayDimension", "string label\nuint32 size\nuint32 stride\n"),
    ),
    POSE_STAMPED: _concat(
        "std_msgs/Header header\ngeometry_msgs/Pose pose\n",
        *_HEADER_DEPS,
        ("geometry_msgs/Pose", "geometry_msgs/Point position\ngeometry_msgs/Quaternion orientation\n"),
        ("geometry_msgs/Point", _POINT),
        ("geometry_msgs/Quaternion", _QUATERNION),
    ),
    TWIST_STAMPED: _concat(
        "std_msgs/Header header\ngeometry_msgs/Twist twist\n",
        *_HEADER_DEPS,
        ("geometry_msgs/Twist", "geometry_msgs/Vector3 linear\ngeometry_msgs/Vector3 angular\n"),
        ("geometry_msgs/Vector3", _POINT),
    ),
    COMPRESSED_VIDEO: _concat(
        "builtin_interfaces/Time timestamp\nstring frame_id\nuint8[] data\nstring format\n",
        ("builtin_interfaces/Time", _TIME),
    ),
    GRIPPER_COMMAND: _concat("std_msgs/Header header\nfloat64 position\nfloat64 max_effort\n", *_HEADER_DEPS),
}


def ros_time(stamp_ns: int) -> dict[str, int]:
    """A ``builtin_interfaces/Time`` as the CDR writer takes it."""
    sec, nanosec = divmod(stamp_ns, 1_000_000_000)
    return {"sec": sec, "nanosec": nanosec}


def header(stamp_ns: int, frame_id: str) -> dict[str, object]:
    return {"stamp": ros_time(stamp_ns), "frame_id": frame_id}


@functools.cache
def encoder(schema_name: str) -> Callable[[dict[str, Any]], bytes]:
    """The CDR encoder of one of :data:`MSGDEFS`: message dict -> payload bytes.

    It is ``mcap_ros2``'s own (the function its ``Writer.write_message`` encodes with, from its
    ``_dynamic`` module); the synthesiser writes every flavor through the stock ``mcap`` writer, so it
    takes the encoder, not the ROS-only writer around it.
    """
    from mcap_ros2._dynamic import serialize_dynamic

    return serialize_dynamic(schema_name, MSGDEFS[schema_name])[schema_name]
