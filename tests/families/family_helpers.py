"""Independent readers for the message-family tests: the stock ``mcap`` reader with the ecosystem's own
decoders (``mcap-ros2-support``, ``mcap-protobuf-support``), PyAV, and the frame code drawn in the pixels.
Nothing here goes through :mod:`pipeline.families`, so a test of it can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import av
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.reader import make_reader
from mcap_protobuf.decoder import DecoderFactory as ProtobufDecoders
from mcap_ros2.decoder import DecoderFactory as Ros2Decoders

from pipeline.config import TopicContract
from pipeline.media.framecode import read_frame_index
from pipeline.synth.calibration import make_calibration
from pipeline.synth.flavors import Flavor, flavor
from pipeline.synth.robot import EpisodeMedia, EpisodeSpec, EpisodeTweaks, write_episode

START_NS = 1_748_851_200_000_000_000
WIDTH, HEIGHT = 128, 96
CAMERAS = ("front", "wrist_left", "wrist_right")
RATES_HZ = {
    "/robot/joint_states": 200, "/robot/action": 50, "/robot/ee_pose": 100, "/robot/joint_commands": 50,
    "/robot/ee_twist": 50, "/robot/gripper_command": 10,
}  # fmt: skip


def write_flavored(
    path: Path,
    name: str,
    *,
    seconds: float = 1.2,
    pixel_encoding: str = "rgb8",
    tweaks: EpisodeTweaks | None = None,
    seed: int = 7,
) -> Path:
    calibration = make_calibration(0, 0, "rb01", 0, WIDTH, HEIGHT)
    spec = EpisodeSpec(
        "rb01",
        "rb01-s000",
        "rb01-s000-e000",
        "fold the towel",
        "op-chen",
        START_NS,
        seconds,
        seed,
        calibration,
    )
    media = EpisodeMedia(width=WIDTH, height=HEIGHT, flavor=name, pixel_encoding=pixel_encoding)
    write_episode(path, spec, media, tweaks)
    return path


def _stamp_ns(decoded: Any) -> int:
    """The capture stamp of a decoded camera message: ROS header.stamp or a (ROS or protobuf) timestamp."""
    header = getattr(decoded, "header", None)
    time = header.stamp if header is not None else decoded.timestamp
    if hasattr(time, "nanosec"):
        return int(time.sec) * 1_000_000_000 + int(time.nanosec)
    return int(time.seconds) * 1_000_000_000 + int(time.nanos)


def source_stamps(path: Path, topic: str) -> list[int]:
    """The capture stamps of a camera topic's messages, in log-time order (the synthetic frame k is the
    k-th message of a clean episode)."""
    with open(path, "rb") as fh:
        reader = make_reader(fh, decoder_factories=[Ros2Decoders(), ProtobufDecoders()])
        return [_stamp_ns(d) for _, _, _, d in reader.iter_decoded_messages(topics=[topic])]


def output_frames(path: Path, topic: str) -> list[tuple[int, int]]:
    """``(presentation stamp, drawn frame index)`` of every frame of an output camera, in decode order,
    decoded as Foxglove does: the CompressedVideo messages' Annex B data through an H.264 decoder."""
    stamps: list[int] = []
    decoder = av.CodecContext.create("h264", "r")
    indices: list[int] = []
    with open(path, "rb") as fh:
        for _, _, message in make_reader(fh).iter_messages(topics=[topic], log_time_order=False):
            video = CompressedVideo.FromString(message.data)
            assert video.format == "h264"
            stamps.append(video.timestamp.ToNanoseconds())
            packet = av.Packet(video.data)
            packet.pts = len(stamps) - 1
            for frame in decoder.decode(packet):
                indices.append((int(frame.pts), read_frame_index(frame.to_ndarray(format="rgb24"))))
    for frame in decoder.decode(None):
        indices.append((int(frame.pts), read_frame_index(frame.to_ndarray(format="rgb24"))))
    return [(stamps[pts], index) for pts, index in indices]


def flavor_contract(name: str, *, pixel_encodings: tuple[str, ...] = ()) -> dict[str, Any]:
    """A vendor's ``topics`` section for one flavor, written by hand (not by ``vendor init``)."""
    shape: Flavor = flavor(name)
    encoding = "cdr" if shape.ros2 else "protobuf"
    stamp = "header.stamp" if shape.ros2 and shape.camera != "video" else "timestamp"
    cameras = [
        {
            "name": camera,
            "topic": shape.camera_topic(camera),
            "rate_hz": 30,
            "message_encodings": [encoding],
            "schema_names": [shape.camera_schema()],
            "stamp_field": stamp,
            **({"formats": [shape.format]} if shape.camera != "raw" else {}),
            **({"pixel_encodings": list(pixel_encodings)} if pixel_encodings else {}),
        }
        for camera in CAMERAS
    ]

    def series(topic: str) -> dict[str, Any]:
        if shape.ros2:
            entry: dict[str, Any] = {"topic": topic, "rate_hz": RATES_HZ[topic], "message_encodings": ["cdr"]}
            if topic != "/robot/joint_commands":
                entry["stamp_field"] = "header.stamp"
            if topic == "/robot/gripper_command":
                entry["fields"] = ["position", "max_effort"]
            return entry
        if topic == "/robot/ee_pose":
            return {
                "topic": topic,
                "rate_hz": 100,
                "message_encodings": ["protobuf"],
                "stamp_field": "timestamp",
            }
        return {
            "topic": topic,
            "rate_hz": RATES_HZ[topic],
            "message_encodings": ["json"],
            "stamp_field": "stamp_ns",
        }

    return {
        "cameras": cameras,
        "state": [series(t) for t in shape.state_topics],
        "actions": [series(t) for t in shape.action_topics],
    }


def contract(name: str, **kwargs: Any) -> TopicContract:
    return TopicContract.model_validate(flavor_contract(name, **kwargs))


def with_absent_camera(name: str, *, required: bool) -> TopicContract:
    """The flavor's contract and one more camera, ``rear``, that its episodes never publish."""
    topics = contract(name).model_dump(mode="json")
    rear = {**topics["cameras"][0], "name": "rear", "topic": "/cam/rear/image_raw/compressed"}
    topics["cameras"].append({**rear, "required": required})
    return TopicContract.model_validate(topics)


# -- several families in one vendor (the scheduled runs) -------------------------------------------------------

#: A camera entry's topic suffix -> the flavors that write it (JPEG and PNG share image_transport's topic).
_CAMERA_KEY = {
    "video": lambda shape: shape.format,
    "image": lambda shape: "image",
    "raw": lambda shape: "raw",
}


def write_family_drop(root: Path, names: tuple[str, ...], *, seconds: float = 1.2) -> dict[str, str]:
    """One episode per flavor under ``root`` (each a robot of its own, with bytes of its own), and the
    calibration sidecar covering them; returns flavor -> the episode's path relative to ``root``."""
    import json

    from pipeline.synth import layout

    out: dict[str, str] = {}
    calibrations = []
    for k, name in enumerate(names):
        robot = f"fam{k + 1:02d}"
        calibration = make_calibration(k, k, robot, 0, WIDTH, HEIGHT).with_window(
            START_NS - 60_000_000_000, START_NS + 3_600_000_000_000
        )
        calibrations.append(calibration.to_json())
        spec = EpisodeSpec(
            robot, f"{robot}-s000", f"{robot}-s000-e000", "fold the towel", "op-chen",
            START_NS + k * 10_000_000_000, seconds, 100 + k, calibration,
        )  # fmt: skip
        media = EpisodeMedia(width=WIDTH, height=HEIGHT, flavor=name)
        write_episode(root / spec.relpath, spec, media)
        out[name] = spec.relpath
    (root / layout.CALIBRATIONS_FILE).write_text(json.dumps(calibrations, indent=2) + "\n")
    return out


def family_camera_name(name: str, camera: str) -> str:
    """The contract's name of a flavor's camera in a vendor that mixes flavors."""
    shape = flavor(name)
    return f"{camera}_{_CAMERA_KEY[shape.camera](shape)}"


def mixed_contract(names: tuple[str, ...]) -> dict[str, Any]:
    """A ``topics`` section accepting episodes of every flavor in ``names`` (one envelope: all ROS 2 or all
    protobuf/JSON): each flavor's cameras and series, optional since an episode carries one flavor's."""
    cameras: dict[str, dict[str, Any]] = {}
    state: dict[str, dict[str, Any]] = {}
    actions: dict[str, dict[str, Any]] = {}
    for name in names:
        topics = flavor_contract(name)
        for entry, camera in zip(topics["cameras"], CAMERAS, strict=True):
            key = family_camera_name(name, camera)
            merged = cameras.setdefault(key, {**entry, "name": key, "required": False, "formats": []})
            merged["formats"] = sorted({*merged.get("formats", []), *entry.get("formats", [])})
            if not merged["formats"]:
                del merged["formats"]
        for section, into in (("state", state), ("actions", actions)):
            for entry in topics[section]:
                into.setdefault(entry["topic"], {**entry, "required": False})
    ros2 = {flavor(n).ros2 for n in names}
    assert len(ros2) == 1, "one vendor, one envelope"
    return {
        "cameras": list(cameras.values()),
        "state": list(state.values()),
        "actions": list(actions.values()),
        "message_encodings": ["cdr"] if ros2 == {True} else ["json", "protobuf"],
        "schema_encodings": ["ros2msg"] if ros2 == {True} else ["jsonschema", "protobuf"],
    }
