"""The synthetic robot-log layout (TOPICS.md) as named constants: topics, rates, schemas, file names."""

from __future__ import annotations

from typing import Any

CAMERA_NAMES: tuple[str, ...] = ("front", "wrist_left", "wrist_right")
CAMERA_RATE_HZ = 30.0
JOINT_STATE_RATE_HZ = 200.0
ACTION_RATE_HZ = 50.0
JOINT_COUNT = 7

JOINT_STATE_TOPIC = "/robot/joint_states"
ACTION_TOPIC = "/robot/action"
# The channel the ``unknown_encoding`` defect adds; clean episodes never carry it.
DIAGNOSTICS_TOPIC = "/robot/diagnostics"


def camera_topic(camera: str) -> str:
    """``/cam/<camera>/h264``: the H.264 stream of one camera."""
    return f"/cam/{camera}/h264"


def calibration_topic(camera: str) -> str:
    """``/cam/<camera>/calibration``: one ``foxglove.CameraCalibration`` at the start of the episode."""
    return f"/cam/{camera}/calibration"


CAMERA_TOPICS: tuple[str, ...] = tuple(camera_topic(c) for c in CAMERA_NAMES)
CALIBRATION_TOPICS: tuple[str, ...] = tuple(calibration_topic(c) for c in CAMERA_NAMES)
REQUIRED_TOPICS: tuple[str, ...] = (*CAMERA_TOPICS, JOINT_STATE_TOPIC, ACTION_TOPIC)

VIDEO_SCHEMA_NAME = "foxglove.CompressedVideo"
CALIBRATION_SCHEMA_NAME = "foxglove.CameraCalibration"
JOINT_STATE_SCHEMA_NAME = "sluice.JointState"
ACTION_SCHEMA_NAME = "sluice.Action"
VIDEO_FORMAT = "h264"

_FLOAT_ARRAY_7: dict[str, Any] = {
    "type": "array",
    "items": {"type": "number"},
    "minItems": JOINT_COUNT,
    "maxItems": JOINT_COUNT,
}
JOINT_STATE_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": JOINT_STATE_SCHEMA_NAME,
    "type": "object",
    "properties": {
        "stamp_ns": {"type": "integer", "description": "hardware stamp, ns"},
        "position": {**_FLOAT_ARRAY_7, "description": "rad"},
        "velocity": {**_FLOAT_ARRAY_7, "description": "rad/s"},
        "effort": {**_FLOAT_ARRAY_7, "description": "N m"},
        "gripper": {"type": "number", "description": "opening, 0 closed .. 1 open"},
    },
    "required": ["stamp_ns", "position", "velocity", "effort", "gripper"],
    "additionalProperties": False,
}
ACTION_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": ACTION_SCHEMA_NAME,
    "type": "object",
    "properties": {
        "stamp_ns": {"type": "integer", "description": "hardware stamp, ns"},
        "joint_targets": {**_FLOAT_ARRAY_7, "description": "rad"},
        "gripper": {"type": "number", "description": "commanded opening, 0 .. 1"},
    },
    "required": ["stamp_ns", "joint_targets", "gripper"],
    "additionalProperties": False,
}

EPISODE_METADATA_NAME = "episode"
EPISODE_METADATA_KEYS: tuple[str, ...] = ("robot_id", "session_id", "episode_id", "task", "operator")

# Files beside the episodes. The manifest is the test oracle: vendor globs (``**/*.mcap``,
# ``**/*.mp4``, ``**/*.meta.json``) never match it, and ingest must not read it.
CALIBRATIONS_FILE = "calibrations.json"
MANIFEST_FILE = "drop.json"
VIDEO_SIDECAR_SUFFIX = ".meta.json"
