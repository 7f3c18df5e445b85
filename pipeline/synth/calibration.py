"""Camera calibrations of the synthetic robots: intrinsics per camera, with validity windows."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from foxglove_schemas_protobuf.CameraCalibration_pb2 import CameraCalibration
from google.protobuf.timestamp_pb2 import Timestamp

from pipeline.synth.layout import CAMERA_NAMES

NS_PER_S = 1_000_000_000


def proto_timestamp(stamp_ns: int) -> Timestamp:
    """A protobuf ``Timestamp`` from integer nanoseconds (no float on the way)."""
    return Timestamp(seconds=stamp_ns // NS_PER_S, nanos=stamp_ns % NS_PER_S)


@dataclass(frozen=True)
class CameraIntrinsics:
    """Pinhole intrinsics with plumb-bob distortion (k1, k2, p1, p2, k3)."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion: tuple[float, ...]
    distortion_model: str = "plumb_bob"

    def to_json(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "height": self.height,
            "fx": self.fx,
            "fy": self.fy,
            "cx": self.cx,
            "cy": self.cy,
            "distortion_model": self.distortion_model,
            "D": list(self.distortion),
        }

    def to_message(self, camera: str, stamp_ns: int) -> CameraCalibration:
        """The ``foxglove.CameraCalibration`` message an episode carries for this camera."""
        k = [self.fx, 0.0, self.cx, 0.0, self.fy, self.cy, 0.0, 0.0, 1.0]
        p = [self.fx, 0.0, self.cx, 0.0, 0.0, self.fy, self.cy, 0.0, 0.0, 0.0, 1.0, 0.0]
        return CameraCalibration(
            timestamp=proto_timestamp(stamp_ns),
            frame_id=camera,
            width=self.width,
            height=self.height,
            distortion_model=self.distortion_model,
            D=list(self.distortion),
            K=k,
            R=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            P=p,
        )


@dataclass(frozen=True)
class Calibration:
    """One calibration of one robot's cameras; the window is filled in once the drop's timeline is known."""

    calibration_id: str
    robot_id: str
    cameras: tuple[tuple[str, CameraIntrinsics], ...]
    valid_from_ns: int = 0
    valid_to_ns: int = 0

    def camera(self, name: str) -> CameraIntrinsics:
        return dict(self.cameras)[name]

    def with_window(self, valid_from_ns: int, valid_to_ns: int) -> Calibration:
        return replace(self, valid_from_ns=valid_from_ns, valid_to_ns=valid_to_ns)

    def to_json(self) -> dict[str, Any]:
        """The record written to ``calibrations.json`` (layout in TOPICS.md)."""
        return {
            "calibration_id": self.calibration_id,
            "robot_id": self.robot_id,
            "valid_from_ns": self.valid_from_ns,
            "valid_to_ns": self.valid_to_ns,
            "cameras": {name: intr.to_json() for name, intr in self.cameras},
        }


def make_calibration(
    seed: int, robot_index: int, robot_id: str, session_index: int, width: int, height: int
) -> Calibration:
    """Intrinsics of one robot's cameras at one session: a per-robot base with a small per-session drift."""
    base = np.random.default_rng([seed, robot_index, 0xCA1])
    drift = np.random.default_rng([seed, robot_index, session_index, 0xCA2])
    scale = width / 640.0
    cameras = []
    for name in CAMERA_NAMES:
        # About a 60-degree horizontal field of view, like a typical wrist or head camera.
        f = float(base.uniform(540.0, 600.0) * scale)
        cx = float(width / 2 + base.uniform(-4.0, 4.0) * scale)
        cy = float(height / 2 + base.uniform(-4.0, 4.0) * scale)
        d = base.normal(0.0, [0.05, 0.02, 0.001, 0.001, 0.005])
        f += float(drift.normal(0.0, 0.5) * scale)
        cameras.append(
            (
                name,
                CameraIntrinsics(
                    width=width,
                    height=height,
                    fx=round(f, 4),
                    fy=round(f * float(base.uniform(0.998, 1.002)), 4),
                    cx=round(cx, 4),
                    cy=round(cy, 4),
                    distortion=tuple(round(float(x), 6) for x in d),
                ),
            )
        )
    return Calibration(
        calibration_id=f"cal-{robot_id}-{session_index:03d}",
        robot_id=robot_id,
        cameras=tuple(cameras),
    )
