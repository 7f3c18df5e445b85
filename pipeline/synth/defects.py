"""One flag per defect, each mapped to one function that makes a file carrying exactly that defect.

Every function takes the planned slot (where the file goes, what it would have held) and returns the
:class:`DropFile` it made. Expected outcomes follow the default severities of
:data:`pipeline.enums.REASON_SEVERITY`; the manifest records them so that tests can compare.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pipeline.enums import REASON_SEVERITY, FileState, ReasonCode, Severity
from pipeline.errors import SluiceError
from pipeline.synth import layout
from pipeline.synth.drop import DropFile, describe_file
from pipeline.synth.flavors import flavor
from pipeline.synth.mutate import damage_h264_samples, flip_chunk_crc, truncate_mid_chunk
from pipeline.synth.robot import EpisodeMedia, EpisodeSpec, EpisodeTweaks, write_episode
from pipeline.synth.video import (
    ClipMedia,
    ClipSpec,
    ClipTweaks,
    reencode_clip,
    write_clip,
    write_spliced_clip,
)


class DefectError(SluiceError, ValueError):
    """A defect cannot be made from what the drop holds."""


class RobotDefect(StrEnum):
    """Defects a robot-log drop can carry, one file each."""

    TRUNCATED = "truncated"
    CRC_FLIPPED = "crc_flipped"
    NON_MONOTONIC = "non_monotonic"
    CLOCK_JUMP = "clock_jump"
    DROPPED_FRAMES = "dropped_frames"
    MISSING_TOPIC = "missing_topic"
    UNKNOWN_ENCODING = "unknown_encoding"
    DUPLICATE = "duplicate"
    ZERO_BYTES = "zero_bytes"
    CORRUPT_IMAGE = "corrupt_image"  # flavors with still-image or raw cameras
    RENAMED_JOINTS = "renamed_joints"  # ROS 2 flavors (JointState names)


class VideoDefect(StrEnum):
    """Defects a video drop can carry, one file each."""

    INTERLACED = "interlaced"
    ALL_BLACK = "all_black"
    ROTATED = "rotated"
    CORRUPT_BITSTREAM = "corrupt_bitstream"
    ZERO_BYTES = "zero_bytes"
    DUPLICATE = "duplicate"
    #: A clean clip again, re-encoded smaller and at another quality: no gate flags it (it is a good clip);
    #: near-duplicate grouping puts it in its original's group.
    REENCODED = "reencoded"
    #: Two recordings spliced without re-encoding, the second's pictures in another colour matrix: no
    #: container-level probe sees it; the transcode finds it and refuses the file.
    COLOUR_CHANGE = "colour_change"


# The reason code each defect must be reported with (none for an exact duplicate: its state says it).
EXPECTED_REASONS: dict[str, tuple[ReasonCode, ...]] = {
    "truncated": (ReasonCode.TRUNCATED,),
    "crc_flipped": (ReasonCode.CRC_MISMATCH,),
    "non_monotonic": (ReasonCode.NON_MONOTONIC_TIME,),
    "clock_jump": (ReasonCode.CLOCK_JUMP,),
    "dropped_frames": (ReasonCode.GAP_RATE_HIGH,),
    "missing_topic": (ReasonCode.MISSING_REQUIRED_TOPIC,),
    "unknown_encoding": (ReasonCode.UNSUPPORTED_ENCODING,),
    "duplicate": (),
    "reencoded": (),
    "zero_bytes": (ReasonCode.ZERO_BYTES,),
    "corrupt_image": (ReasonCode.DECODE_ERROR,),
    "renamed_joints": (ReasonCode.SCHEMA_DRIFT,),
    "interlaced": (ReasonCode.INTERLACED,),
    "all_black": (ReasonCode.BLANK_VIDEO,),
    "rotated": (ReasonCode.ROTATED,),
    "corrupt_bitstream": (ReasonCode.DECODE_ERROR,),
    "colour_change": (ReasonCode.COLOUR_MISMATCH,),
}

#: Defects whose reason quarantines here though its default severity flags: joint names that change
#: mid-episode make the stream's vectors change meaning (a schema that differs from *earlier* episodes
#: only flags).
QUARANTINED_DEFECTS = frozenset({"renamed_joints"})
#: Defects that ingest and the pre-gate pass (the file is whole and its stream-level tags are fine) and the
#: transcode refuses: their expected outcome is the run's, after the transcode step.
TRANSCODE_DEFECTS = frozenset({"colour_change"})
#: Defects that only make sense for some flavors (see :func:`defect_applies`).
CORRUPT_IMAGE_CAMERA = layout.CAMERA_NAMES[0]
RENAME_JOINTS_AT_FRACTION = 0.5  # of the episode

# Defect parameters. Each is far enough past any sane threshold that the defect is unmistakable.
DROPPED_FRAMES_CAMERA = layout.CAMERA_NAMES[1]
DROPPED_FRAMES_FRACTION = 0.2  # a 20% gap rate, twice a typical 10% quarantine threshold
BACKWARD_STEPS = 5
CLOCK_JUMP_NS = 3_600 * 1_000_000_000  # an NTP step of one hour
MISSING_TOPIC = layout.ACTION_TOPIC
UNKNOWN_ENCODING = "x-acme-packed"
DAMAGED_SAMPLES = 3
ROTATION_DEG = 90


def expected_outcome(defect: str | None) -> tuple[FileState, tuple[ReasonCode, ...]]:
    """The state and reasons a correct ingest gives a file with this defect (None = clean)."""
    if defect is None:
        return FileState.ACCEPTED, ()
    reasons = EXPECTED_REASONS[defect]
    if defect == "duplicate":
        return FileState.DUPLICATE, reasons
    if not reasons:
        return FileState.ACCEPTED, reasons
    if defect in QUARANTINED_DEFECTS or any(REASON_SEVERITY[r] is Severity.QUARANTINE for r in reasons):
        return FileState.QUARANTINED, reasons
    return FileState.ACCEPTED_WITH_FLAGS, reasons


@dataclass(frozen=True)
class RobotSlot:
    """A planned robot-log file: where it goes and the episode it holds (or would have held)."""

    root: Path
    spec: EpisodeSpec
    media: EpisodeMedia
    source: DropFile | None = None  # the clean file a duplicate copies

    @property
    def path(self) -> Path:
        return self.root / self.spec.relpath


@dataclass(frozen=True)
class VideoSlot:
    """A planned video clip."""

    root: Path
    spec: ClipSpec
    media: ClipMedia
    source: DropFile | None = None

    @property
    def path(self) -> Path:
        return self.root / self.spec.relpath


def _write(slot: RobotSlot, tweaks: EpisodeTweaks | None = None) -> dict[str, Any]:
    """Write the slot's episode; returns what the manifest says about it."""
    result = write_episode(slot.path, slot.spec, slot.media, tweaks)
    spec = slot.spec
    return dict(
        robot_id=spec.robot_id,
        session_id=spec.session_id,
        episode_id=spec.episode_id,
        calibration_id=spec.calibration.calibration_id,
        start_ns=result.start_ns,
        end_ns=result.end_ns,
        message_counts=result.message_counts,
        details=result.details,
    )


def _describe(slot: RobotSlot | VideoSlot, defect: str | None, info: dict[str, Any]) -> DropFile:
    return describe_file(slot.root, slot.path, defect, expected_outcome(defect), info)


def _episode_file(slot: RobotSlot, defect: str | None, tweaks: EpisodeTweaks | None = None) -> DropFile:
    return _describe(slot, defect, _write(slot, tweaks))


def write_clean_episode(slot: RobotSlot) -> DropFile:
    """A clean episode (no defect)."""
    return _episode_file(slot, None)


def _robot_truncated(slot: RobotSlot) -> DropFile:
    info = _write(slot)
    original = slot.path.stat().st_size
    size = truncate_mid_chunk(slot.path)
    # The counts were those of the whole file; what survives the cut is for the reader to find out.
    info.update(message_counts=None, details={"original_size_bytes": original, "truncated_at": size})
    return _describe(slot, RobotDefect.TRUNCATED, info)


def _robot_crc_flipped(slot: RobotSlot) -> DropFile:
    info = _write(slot)
    info.update(details={"crc_offset": flip_chunk_crc(slot.path)})
    return _describe(slot, RobotDefect.CRC_FLIPPED, info)


def _robot_non_monotonic(slot: RobotSlot) -> DropFile:
    tweaks = EpisodeTweaks(backward_topic=layout.JOINT_STATE_TOPIC, backward_steps=BACKWARD_STEPS)
    return _episode_file(slot, RobotDefect.NON_MONOTONIC, tweaks)


def _robot_clock_jump(slot: RobotSlot) -> DropFile:
    tweaks = EpisodeTweaks(clock_jump_at_s=slot.spec.seconds / 2, clock_jump_ns=CLOCK_JUMP_NS)
    return _episode_file(slot, RobotDefect.CLOCK_JUMP, tweaks)


def _robot_dropped_frames(slot: RobotSlot) -> DropFile:
    tweaks = EpisodeTweaks(drop_camera=DROPPED_FRAMES_CAMERA, drop_fraction=DROPPED_FRAMES_FRACTION)
    return _episode_file(slot, RobotDefect.DROPPED_FRAMES, tweaks)


def _robot_missing_topic(slot: RobotSlot) -> DropFile:
    # the flavor's first action topic (the default flavor's is MISSING_TOPIC)
    tweaks = EpisodeTweaks(omit_topics=frozenset({flavor(slot.media.flavor).action_topics[0]}))
    return _episode_file(slot, RobotDefect.MISSING_TOPIC, tweaks)


def _robot_unknown_encoding(slot: RobotSlot) -> DropFile:
    tweaks = EpisodeTweaks(extra_channel_encoding=UNKNOWN_ENCODING)
    return _episode_file(slot, RobotDefect.UNKNOWN_ENCODING, tweaks)


def _robot_corrupt_image(slot: RobotSlot) -> DropFile:
    # a picture in the middle of the first camera's stream
    frames = int(slot.spec.seconds * layout.CAMERA_RATE_HZ)
    tweaks = EpisodeTweaks(corrupt_image_camera=CORRUPT_IMAGE_CAMERA, corrupt_image_frame=frames // 2)
    return _episode_file(slot, RobotDefect.CORRUPT_IMAGE, tweaks)


def _robot_renamed_joints(slot: RobotSlot) -> DropFile:
    tweaks = EpisodeTweaks(rename_joints_at_s=slot.spec.seconds * RENAME_JOINTS_AT_FRACTION)
    return _episode_file(slot, RobotDefect.RENAMED_JOINTS, tweaks)


def defect_applies(defect: RobotDefect | str, flavor_name: str) -> bool:
    """Whether a robot-log defect can be made in a flavor: a corrupt picture needs cameras whose pictures
    stand alone (still images, raw), renamed joints need named joints (the ROS 2 flavors)."""
    chosen = flavor(flavor_name)
    if defect == RobotDefect.CORRUPT_IMAGE:
        return chosen.camera != "video"
    if defect == RobotDefect.RENAMED_JOINTS:
        return chosen.ros2
    return True


def _slot_ids(slot: RobotSlot | VideoSlot) -> dict[str, str]:
    """The ids a file's place in the drop claims (a copy's content still claims its source's)."""
    if isinstance(slot, VideoSlot):
        return {"clip_id": slot.spec.clip_id}
    spec = slot.spec
    return {"robot_id": spec.robot_id, "session_id": spec.session_id, "episode_id": spec.episode_id}


def _copy_of(slot: RobotSlot | VideoSlot, defect: str) -> DropFile:
    if slot.source is None:
        raise DefectError(f"defect {defect!r} needs a clean file to copy; ask for at least one clean file")
    slot.path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(slot.root / slot.source.path, slot.path)
    return _describe(slot, defect, _slot_ids(slot) | {"duplicate_of": slot.source.path, "details": {}})


def _robot_duplicate(slot: RobotSlot) -> DropFile:
    return _copy_of(slot, RobotDefect.DUPLICATE)


def _empty(slot: RobotSlot | VideoSlot, defect: str) -> DropFile:
    slot.path.parent.mkdir(parents=True, exist_ok=True)
    slot.path.write_bytes(b"")
    return _describe(slot, defect, _slot_ids(slot) | {"details": {}})


def _robot_zero_bytes(slot: RobotSlot) -> DropFile:
    return _empty(slot, RobotDefect.ZERO_BYTES)


ROBOT_DEFECTS: dict[RobotDefect, Callable[[RobotSlot], DropFile]] = {
    RobotDefect.TRUNCATED: _robot_truncated,
    RobotDefect.CRC_FLIPPED: _robot_crc_flipped,
    RobotDefect.NON_MONOTONIC: _robot_non_monotonic,
    RobotDefect.CLOCK_JUMP: _robot_clock_jump,
    RobotDefect.DROPPED_FRAMES: _robot_dropped_frames,
    RobotDefect.MISSING_TOPIC: _robot_missing_topic,
    RobotDefect.UNKNOWN_ENCODING: _robot_unknown_encoding,
    RobotDefect.DUPLICATE: _robot_duplicate,
    RobotDefect.ZERO_BYTES: _robot_zero_bytes,
    RobotDefect.CORRUPT_IMAGE: _robot_corrupt_image,
    RobotDefect.RENAMED_JOINTS: _robot_renamed_joints,
}


def _write_clip(slot: VideoSlot, tweaks: ClipTweaks | None = None) -> dict[str, Any]:
    result = write_clip(slot.path, slot.spec, slot.media, tweaks)
    return {"clip_id": slot.spec.clip_id, "frames": result.frames, "details": result.details}


def _clip_file(slot: VideoSlot, defect: str | None, tweaks: ClipTweaks | None = None) -> DropFile:
    return _describe(slot, defect, _write_clip(slot, tweaks))


def write_clean_clip(slot: VideoSlot) -> DropFile:
    """A clean clip (no defect)."""
    return _clip_file(slot, None)


def _video_interlaced(slot: VideoSlot) -> DropFile:
    return _clip_file(slot, VideoDefect.INTERLACED, ClipTweaks(interlaced=True))


def _video_all_black(slot: VideoSlot) -> DropFile:
    return _clip_file(slot, VideoDefect.ALL_BLACK, ClipTweaks(all_black=True))


def _video_rotated(slot: VideoSlot) -> DropFile:
    return _clip_file(slot, VideoDefect.ROTATED, ClipTweaks(rotation_deg=ROTATION_DEG))


def _video_corrupt_bitstream(slot: VideoSlot) -> DropFile:
    info = _write_clip(slot)
    info["details"] = info["details"] | {
        "damaged_samples": damage_h264_samples(slot.path, DAMAGED_SAMPLES, seed=slot.spec.seed)
    }
    return _describe(slot, VideoDefect.CORRUPT_BITSTREAM, info)


def _video_zero_bytes(slot: VideoSlot) -> DropFile:
    return _empty(slot, VideoDefect.ZERO_BYTES)


def _video_duplicate(slot: VideoSlot) -> DropFile:
    return _copy_of(slot, VideoDefect.DUPLICATE)


#: The re-encode of a ``reencoded`` copy: 5/4 of the size (a smaller copy of the 320x240 default would fall
#: below the example video contract's 320x240 minimum and be quarantined), lower quality, no B-frames, another GOP.
REENCODE_SCALE = 1.25
REENCODE_CRF = 30
REENCODE_GOP_FRAMES = 15


def _video_reencoded(slot: VideoSlot) -> DropFile:
    if slot.source is None:
        raise DefectError(
            "defect 'reencoded' needs a clean clip to re-encode; ask for at least one clean clip"
        )
    reencode_clip(
        slot.root / slot.source.path,
        slot.path,
        scale=REENCODE_SCALE,
        crf=REENCODE_CRF,
        gop_frames=REENCODE_GOP_FRAMES,
    )
    details = {"near_duplicate_of": slot.source.path, "scale": REENCODE_SCALE, "crf": REENCODE_CRF}
    return _describe(slot, VideoDefect.REENCODED, _slot_ids(slot) | {"details": details})


def _video_colour_change(slot: VideoSlot) -> DropFile:
    if math.floor(slot.spec.seconds * slot.media.fps) < 2:
        raise DefectError("defect 'colour_change' needs clips of at least two frames to splice")
    result = write_spliced_clip(slot.path, slot.spec, slot.media)
    return _describe(
        slot,
        VideoDefect.COLOUR_CHANGE,
        _slot_ids(slot) | {"frames": result.frames, "details": result.details},
    )


VIDEO_DEFECTS: dict[VideoDefect, Callable[[VideoSlot], DropFile]] = {
    VideoDefect.INTERLACED: _video_interlaced,
    VideoDefect.ALL_BLACK: _video_all_black,
    VideoDefect.ROTATED: _video_rotated,
    VideoDefect.CORRUPT_BITSTREAM: _video_corrupt_bitstream,
    VideoDefect.ZERO_BYTES: _video_zero_bytes,
    VideoDefect.DUPLICATE: _video_duplicate,
    VideoDefect.REENCODED: _video_reencoded,
    VideoDefect.COLOUR_CHANGE: _video_colour_change,
}
