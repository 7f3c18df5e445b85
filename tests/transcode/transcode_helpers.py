"""Readers and rewriters the transcode tests share (stock mcap reader/writer, PyAV)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.reader import make_reader
from mcap.records import Channel, Message

from pipeline.config import TrainingProfile, VendorConfig, load_vendor
from pipeline.mcaplog.rewrite import rewrite_with_stock_writer
from pipeline.synth.calibration import make_calibration
from pipeline.synth.robot import EpisodeMedia, EpisodeSpec, write_episode
from pipeline.transcode import Provenance, RobotTranscodeConfig
from pipeline.transcode.source import read_source

REPO_ROOT = Path(__file__).resolve().parents[2]
ACME = REPO_ROOT / "dags" / "vendors" / "acme_robotics.yaml"
NORTHWIND = REPO_ROOT / "dags" / "vendors" / "northwind_video.yaml"
# 128x96 gives the frame code 8x8-pixel cells; 1.5 s holds several GOPs of every profile.
WIDTH, HEIGHT, SECONDS = 128, 96, 1.5
START_NS = 1_748_851_200_000_000_000
PROVENANCE = Provenance(
    source_sha256="ab" * 32, config_hash="cd" * 32, code_version="test", calibration_id="cal-1"
)


def write_source(path: Path, *, seconds: float = SECONDS, seed: int = 7) -> Path:
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
    write_episode(path, spec, EpisodeMedia(width=WIDTH, height=HEIGHT))
    return path


def vendor_with(transcode: dict[str, Any], path: Path = ACME, **sections: Any) -> VendorConfig:
    """The example vendor with its transcode section replaced (and any other section overridden)."""
    data = load_vendor(path).model_dump(mode="json")
    data["transcode"] = transcode
    data.update(sections)
    return VendorConfig.model_validate(data)


def config_for(profile: TrainingProfile | str, **transcode: Any) -> RobotTranscodeConfig:
    return RobotTranscodeConfig.from_vendor(vendor_with({"profile": str(profile), **transcode}))


# (channel, message) -> replacement payloads (empty list drops the message)
Edit = Callable[[Channel, Message], list[bytes]]


def rewrite(src: Path, dst: Path, edit: Edit) -> Path:
    """Copy an MCAP with the stock writer, schemas, channels and metadata kept, each message's payload
    replaced by the payloads ``edit`` returns (in file order)."""

    def messages(channel: Channel, message: Message) -> list[Message]:
        return [dataclasses.replace(message, data=data) for data in edit(channel, message)]

    return rewrite_with_stock_writer(src, dst, edit=messages, log_time_order=False)


def camera_messages(path: Path, topic: str) -> list[CompressedVideo]:
    """The CompressedVideo messages of a topic in file order."""
    with open(path, "rb") as fh:
        return [
            CompressedVideo.FromString(m.data)
            for _, c, m in make_reader(fh).iter_messages(topics=[topic], log_time_order=False)
        ]


def source_camera_stamps(path: Path, config) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    """Each camera's source stamps by source frame index (synthetic frames are numbered 0, 1, 2...)."""
    episode = read_source(path, config.contract, config.truth)
    return {c.name: list(c.stamps_ns) for c in episode.cameras}


def frame_table(path: Path) -> dict[str, dict[str, Any]]:
    with open(path, "rb") as fh:
        meta = {m.name: dict(m.metadata) for m in make_reader(fh).iter_metadata()}
    return {name: json.loads(text) for name, text in meta["sluice.frames"].items()}
