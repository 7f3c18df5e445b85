"""``sluice vendor init``: a vendor file proposed from one sample log, every guess commented.

The sample is read once, as the pre-gate reads a log (:func:`pipeline.mcaplog.read_log`: CRCs, per-topic
rates and stamps), with a content probe on every topic (picture formats and sizes, joint names). Each topic
is then sorted by its type, through :mod:`pipeline.families`: a camera family becomes a camera; a state or
action family (or a type of numeric fields whose topic name says state or command) a series; a
calibration type a calibration topic; anything else is listed as ignored, with its numeric fields when it
has some, so that a person can move it into the contract with ``fields:``.

The file is written as plain YAML (JSON scalars, which the project's loader reads) and then loaded back
through :func:`pipeline.config.load_vendor`: what ``vendor init`` writes always validates.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcap.records import Channel, Schema

from pipeline.errors import SluiceError

#: Words of a topic name that say the stream is a command, or a measured state.
ACTION_WORDS = ("cmd", "command", "action", "target", "goal", "setpoint", "control")
STATE_WORDS = ("state", "joint", "pose", "odom", "wrench", "imu", "feedback", "position", "effort")
#: Topic path words that name the transport, not the camera (``/cam/front/image_raw/compressed``).
CAMERA_NOISE = frozenset(
    {"cam", "cams", "camera", "cameras", "image", "images", "image_raw", "image_rect", "compressed", "raw",
     "video", "h264", "h265", "hevc", "jpeg", "png", "color", "rgb", "sensor", "sensors"}
)  # fmt: skip
CALIBRATION_SCHEMAS = frozenset(
    {"foxglove.CameraCalibration", "foxglove_msgs/msg/CameraCalibration", "sensor_msgs/msg/CameraInfo"}
)
#: The skew limit proposed: the largest skew measured in the sample, times this margin.
SKEW_MARGIN = 2.0
#: The smallest skew limit proposed (the default): a sample with tiny transport delays is no promise.
MIN_SKEW_S = 0.05


class ProposeError(SluiceError, ValueError):
    """A sample cannot give a vendor file (it does not read, or holds no topic), or the file cannot be written
    where it was asked to be."""


@dataclass
class _Topic:
    topic: str
    role: str  # camera | state | actions | calibration | ignored
    entry: dict[str, Any]
    notes: list[str] = field(default_factory=list)


class _AllTopics(Mapping[str, Any]):
    """Content probes for every topic of the sample: a camera probe for camera types, a series probe for
    the rest (it reads named vectors and numeric fields)."""

    def __init__(self, decode_every: int) -> None:
        self._decode_every = decode_every

    def __getitem__(self, topic: str) -> Any:
        return self._factory

    def get(self, topic: str, default: Any = None) -> Any:
        return self._factory

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def _factory(self, schema: Schema | None, channel: Channel) -> Any:
        from pipeline.families import camera_family
        from pipeline.families.probe import CameraProbe, SeriesProbe

        if camera_family(schema.name if schema else None) is not None:
            return CameraProbe(schema, channel, decode_every=self._decode_every)
        return SeriesProbe(schema, channel, fields=(), stamp_field=None)


def _rate(rate_hz: float | None) -> float:
    """A measured rate rounded as a contract states it: whole Hz from 5 Hz up, else one decimal."""
    if not rate_hz:
        return 1.0
    return float(round(rate_hz)) if rate_hz >= 5 else max(0.1, round(rate_hz, 1))


def _camera_name(topic: str, taken: set[str]) -> str:
    words = [w for w in re.split(r"[/]+", topic.lower()) if w and w not in CAMERA_NOISE]
    base = re.sub(r"[^a-z0-9_]+", "_", "_".join(words)).strip("_") or "camera"
    if not base[0].isalpha():
        base = f"cam_{base}"
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _words(topic: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", topic.lower())) - {""}


def _series_role(topic: str, family_name: str | None) -> str | None:
    words = _words(topic)
    if any(w.startswith(a) for w in words for a in ACTION_WORDS):
        return "actions"
    if any(w.startswith(s) for w in words for s in STATE_WORDS):
        return "state"
    if family_name is not None:  # a known state/action type on a topic whose name says neither
        return "actions" if "Twist" in family_name or "MultiArray" in family_name else "state"
    return None


def propose(
    name: str, sample: Path, source_url: str, *, roles: Mapping[str, str] | None = None
) -> tuple[str, dict[str, Any]]:
    """``(YAML text, summary)`` of a vendor file for ``name`` proposed from ``sample``.

    ``roles`` (topic -> ``state`` or ``actions``) names what a topic is where its name and type do not say
    (``vendor init --state TOPIC``); its numeric fields are then read by path. Raises
    :class:`ProposeError` when the sample does not read, holds no message, a named topic is not in it or
    has no number to read, or nothing in it is a camera, state or actions.
    """
    roles = dict(roles or {})
    from pipeline.config.contract import QualityPre
    from pipeline.families import camera_family, series_family
    from pipeline.families.table import STAMP_FIELD_GUESSES, FrameKind
    from pipeline.mcaplog import read_log

    report = read_log(
        sample,
        stamp_fields=STAMP_FIELD_GUESSES,
        content_probes=_AllTopics(QualityPre().decode_every_frames),
    )
    if not report.ok:
        fatal = report.fatal
        raise ProposeError(
            f"{sample} does not read: {fatal.code.value}: {fatal.detail}" if fatal else str(sample)
        )
    if not report.topics:
        raise ProposeError(f"{sample} holds no topic to propose a contract from")
    numeric = first_message_fields(sample)
    unknown = sorted(set(roles) - {t.topic for t in report.topics})
    if unknown:
        raise ProposeError(
            f"{sample} has no topic {', '.join(unknown)}; its topics: {', '.join(t.topic for t in report.topics)}"
        )
    topics: list[_Topic] = []
    names: set[str] = set()
    skew_ns = 0
    for t in report.topics:
        rate = _rate(t.rate_hz)
        base: dict[str, Any] = {
            "topic": t.topic,
            "rate_hz": rate,
            "message_encodings": [t.message_encoding],
            **({"schema_names": [t.schema_name]} if t.schema_name else {}),
            "stamp_field": t.stamp_field,
        }
        notes = [f"{t.schema_name or 'no schema'} in {t.message_encoding}, measured {t.rate_hz or 0:.2f} Hz"]
        notes.append(
            f"stamp found at {t.stamp_field}" if t.stamp_field else "no stamp field found: log time is used"
        )
        if t.skew_max_ns is not None and t.skew_min_ns is not None:
            skew_ns = max(skew_ns, abs(t.skew_max_ns), abs(t.skew_min_ns))
        content = t.content
        family = camera_family(t.schema_name)
        if family is not None and content is not None:
            entry = {"name": _camera_name(t.topic, names), **base}
            if family.kind is FrameKind.RAW:
                entry["pixel_encodings"] = sorted(set(content.formats))
            elif content.formats:
                entry["formats"] = sorted(set(content.formats))
            if content.width_px:
                entry["width_px"], entry["height_px"] = content.width_px, content.height_px
            notes.append(
                f"{family.name}: {', '.join(content.formats) or 'no format read'}, "
                f"{', '.join(content.sizes) or 'size unknown'}"
            )
            if content.problem_count:
                notes.append(
                    f"WARNING: {content.problem_count} picture(s) of the sample are bad: {content.problems[0].detail}"
                )
            topics.append(_Topic(t.topic, "camera", entry, notes))
            continue
        if t.schema_name in CALIBRATION_SCHEMAS:
            topics.append(_Topic(t.topic, "calibration", {}, notes))
            continue
        sfamily = series_family(t.schema_name)
        fields = numeric.get(t.topic, [])
        role = _series_role(t.topic, sfamily.name if sfamily else None) if (sfamily or fields) else None
        named = roles.get(t.topic)
        if named is not None:
            if not (sfamily or fields) or t.message_encoding not in ("json", "cdr", "protobuf"):
                raise ProposeError(
                    f"{t.topic} cannot be {named}: its messages ({t.schema_name or 'no schema'} in "
                    f"{t.message_encoding}) hold no number to read"
                )
            role = named
        if role is None or t.message_encoding not in ("json", "cdr", "protobuf"):
            if fields:
                notes.append(
                    f"numeric fields: {', '.join(fields[:12])}" + (" ..." if len(fields) > 12 else "")
                )
            topics.append(_Topic(t.topic, "ignored", {}, notes))
            continue
        entry = dict(base)
        if sfamily is not None:
            notes.append(f"{sfamily.name}: the type's own vectors")
            if content is not None and content.names:
                notes.append(f"names: {', '.join(content.names)}")
        elif t.message_encoding != "json":
            entry["fields"] = fields
            notes.append("a type of its own: its numeric fields picked by path")
        else:
            notes.append("JSON: each message's object is taken whole")
        notes.append(
            f"{role}: named on the command line"
            if named is not None
            else f"{role}: from the topic's name"
            if _series_role(t.topic, None)
            else f"{role}: from its type"
        )
        topics.append(_Topic(t.topic, role, entry, notes))
    cameras = [t for t in topics if t.role == "camera"]
    if not cameras and not any(t.role in ("state", "actions") for t in topics):
        fields_of = {
            t.topic: next((n for n in t.notes if n.startswith("numeric fields: ")), "no numeric field")
            for t in topics
        }
        readable = [t for t in topics if fields_of[t.topic] != "no numeric field"]
        listed = "; ".join(f"{t.topic} ({t.notes[0]}; {fields_of[t.topic]})" for t in topics)
        hint = (
            f" Name what they are: --state {readable[0].topic} or --actions {readable[0].topic} (repeatable)."
            if readable
            else " None of them holds a number to read as state or actions."
        )
        raise ProposeError(
            f"{sample}: no camera, state or action topic found by type or name. Topics: {listed}.{hint}"
        )
    text = _render(name, sample, source_url, report, topics, skew_ns)
    summary = {
        role: [t.topic for t in topics if t.role == role]
        for role in ("camera", "state", "actions", "calibration", "ignored")
    }
    return text, summary


def write_proposal(
    name: str, sample: Path, source_url: str, target: Path, *, roles: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Propose a vendor file (:func:`propose`), check that it loads, and write it to ``target`` (through
    a file of the vendor's name in a scratch folder beside it, renamed into place)."""
    import os
    import shutil
    import tempfile

    from pipeline.config.loader import load_vendor
    from pipeline.paths import make_folder, refusal

    # The scratch folder first: a target that cannot be written is said before the sample is read.
    why_not = make_folder(target.parent)
    if why_not is None:
        try:
            scratch = Path(tempfile.mkdtemp(prefix=f".{name}-init-", dir=target.parent))
        except OSError as exc:  # a folder that exists but takes no file: read-only, permission denied
            why_not = refusal(target.parent, exc)
    if why_not is not None:
        raise ProposeError(f"cannot write the vendor file {target}: {why_not}")
    try:
        text, summary = propose(name, sample, source_url, roles=roles)
        staged = scratch / f"{name}.yaml"
        staged.write_text(text)
        load_vendor(staged)  # raises ConfigError: a proposal that does not validate is a bug here
        os.replace(staged, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return summary


def first_message_fields(sample: Path) -> dict[str, list[str]]:
    """The numeric fields of each topic's first message (dotted paths), stamps and headers left out."""
    from pipeline.families import numeric_fields
    from pipeline.mcaplog import iter_messages
    from pipeline.mcaplog.decode import decoder_for
    from pipeline.mcaplog.exceptions import DecodeError

    out: dict[str, list[str]] = {}
    for schema, channel, message in iter_messages(sample, log_time_order=False):
        if channel.topic in out:
            continue
        try:
            decode = decoder_for(schema, channel.message_encoding)
            decoded = decode(message.data) if decode is not None else None
        except DecodeError:
            decoded = None
        fields = (
            numeric_fields(decoded, skip=("header", "timestamp", "stamp", "stamp_ns"))
            if decoded is not None
            else {}
        )
        out[channel.topic] = sorted(fields)
    return out


def _scalar(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _entry_lines(entry: Mapping[str, Any], notes: list[str]) -> list[str]:
    lines = [f"    # {n}" for n in notes]
    first = True
    for key, value in entry.items():
        lines.append(f"    {'- ' if first else '  '}{key}: {_scalar(value)}")
        first = False
    return lines


def _render(name: str, sample: Path, source_url: str, report: Any, topics: list[_Topic], skew_ns: int) -> str:
    encodings = sorted({t.message_encoding for t in report.topics})
    schema_encodings = sorted({t.schema_encoding or "none" for t in report.topics})
    compressions = sorted({c or "none" for c in report.compressions} | {"none"})
    max_skew_s = max(MIN_SKEW_S, math.ceil(skew_ns * SKEW_MARGIN / 1e7) / 100)
    episode = report.metadata_record("episode")
    lines = [
        f"# {name}: proposed by `sluice vendor init` from {sample.name}. Every guess says why in a comment above it;",
        "# read them, then `sluice vendor validate` this file and `sluice run` it.",
        "",
        f"name: {name}",
        f"description: {_scalar(f'Robot logs like {sample.name}')}",
        "kind: mcap",
        "",
        "source:",
        f"  url: {_scalar(source_url)}",
        '  include: ["**/*.mcap"]',
        "",
        "topics:",
    ]
    for role, key in (("camera", "cameras"), ("state", "state"), ("actions", "actions")):
        chosen = [t for t in topics if t.role == role]
        if not chosen:
            lines.append(f"  {key}: []")
            continue
        lines.append(f"  {key}:")
        for t in chosen:
            lines += _entry_lines(t.entry, t.notes)
    lines += [
        "  # every message and schema encoding the sample uses; any other on any channel is quarantined",
        f"  message_encodings: {_scalar(encodings)}",
        f"  schema_encodings: {_scalar(schema_encodings)}",
        f"  compressions: {_scalar(compressions)}  # chunk compressions seen in the sample (and none)",
    ]
    ignored = [t for t in topics if t.role == "ignored"]
    if ignored:
        lines.append(
            "  # ignored: not a camera, state or action type (kept in the transcode's native group):"
        )
        for t in ignored:
            lines.append(f"  #   {t.topic}: {'; '.join(t.notes)}")
    lines += [
        "",
        "timestamps:",
        "  truth: hardware                    # the payload stamps (stamp_field) are the episode's clock",
        f"  max_skew_s: {max_skew_s}  # {SKEW_MARGIN:g}x the largest stamp vs log-time skew measured "
        f"({skew_ns / 1e6:.1f} ms), at least {MIN_SKEW_S}",
    ]
    calibration = [t.topic for t in topics if t.role == "calibration"]
    if calibration:
        lines += [
            "",
            "calibration:",
            f"  topics: {_scalar(calibration)}  # calibration types found in the sample",
        ]
    if episode is None or not {"robot_id", "session_id"} <= set(episode.values):
        lines += [
            "",
            "# NOTE: the sample has no 'episode' metadata record with robot_id and session_id (rosbag2",
            "# writes none); the pre-gate quarantines robot logs without them (missing_metadata). Take them",
            "# from the drop's folder layout, or have the recorder write the record:",
            "episode_metadata:",
            "  path_pattern: '(?P<robot_id>[^/]+)/(?P<session_id>[^/]+)/[^/]+$'  # robot/session/file.mcap",
        ]
    return "\n".join(lines) + "\n"
