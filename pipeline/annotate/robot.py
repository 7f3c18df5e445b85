"""Built-in annotators over a robot log's streams and metadata: gripper and idle events, task text, message
fingerprints. None needs a model."""

from __future__ import annotations

import hashlib
import re
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from pipeline.annotate.base import Annotator, AnnotatorInput, missing_input
from pipeline.annotate.source import VIDEO_SCHEMA, EpisodeSource
from pipeline.config.types import FrozenModel
from pipeline.enums import SourceKind

NS_PER_S = 1_000_000_000


class GripperParams(FrozenModel):
    # Hysteresis on the 0 (closed) .. 1 (open) gripper reading: a close needs < 0.4, an open > 0.6, so sensor
    # noise around one level never counts as a string of events.
    open_above: float = Field(default=0.6, ge=0, le=1, description="Gripper reading that counts as open.")
    closed_below: float = Field(default=0.4, ge=0, le=1, description="Gripper reading that counts as closed.")
    # 0.02 rad/s over 7 joints is below what a teleoperator's hand holds still.
    idle_speed_rad_s: float = Field(default=0.02, ge=0, description="Joint-speed norm below this is idle.")
    # Shorter pauses are part of a motion (a grasp settles in about a quarter second).
    min_idle_s: float = Field(default=0.5, gt=0, description="Shortest idle span reported.")


class GripperEvents(Annotator):
    """Gripper open/close events and idle spans from the state stream; ``quality_motion`` = 1 - idle share."""

    name = "gripper_events"
    inputs = frozenset({AnnotatorInput.STATE})
    kinds = frozenset({SourceKind.MCAP})
    Params: ClassVar[type[FrozenModel]] = GripperParams

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        p = self.params
        state = source.state()
        t_s = (state.stamp_ns - state.stamp_ns[0]) / NS_PER_S
        events = []
        grip = state.gripper
        if np.isfinite(grip).any():
            level = None
            for i, g in enumerate(grip.tolist()):
                if not np.isfinite(g):
                    continue
                new = "open" if g > p.open_above else "closed" if g < p.closed_below else level
                if level is not None and new != level:
                    events.append(
                        {"t_s": round(float(t_s[i]), 3), "kind": "open" if new == "open" else "close"}
                    )
                level = new
        speed = np.sqrt(np.nansum(state.velocity**2, axis=1)) if state.velocity.size else np.zeros(len(t_s))
        spans = _spans(speed < p.idle_speed_rad_s, t_s, p.min_idle_s)
        duration_s = float(t_s[-1] - t_s[0]) if len(t_s) > 1 else 0.0
        idle_s = sum(b - a for a, b in spans)
        idle_fraction = idle_s / duration_s if duration_s > 0 else 1.0
        return {
            "gripper_events.events": events,
            "gripper_events.open_count": sum(e["kind"] == "open" for e in events),
            "gripper_events.close_count": sum(e["kind"] == "close" for e in events),
            "gripper_events.idle_spans_s": [[round(a, 3), round(b, 3)] for a, b in spans],
            "gripper_events.idle_fraction": round(idle_fraction, 4),
            "quality_motion": round(max(0.0, 1.0 - idle_fraction), 4),
        }


def _spans(mask: np.ndarray, t_s: np.ndarray, min_s: float) -> list[tuple[float, float]]:
    """Time spans where ``mask`` holds for at least ``min_s``."""
    spans = []
    start = None
    for i, flag in enumerate(mask.tolist()):
        if flag and start is None:
            start = i
        if (not flag or i == len(mask) - 1) and start is not None:
            end = i if flag else i - 1
            if t_s[end] - t_s[start] >= min_s:
                spans.append((float(t_s[start]), float(t_s[end])))
            start = None
    return spans


class TaskText(Annotator):
    """The task text of the episode (catalog first, then the log's metadata record), normalised."""

    name = "task_text"
    inputs = frozenset({AnnotatorInput.METADATA})

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        text = source.task or source.metadata().get("task")
        if not text or not text.strip():
            raise missing_input(self.name, "the episode has no task text in the catalog or its metadata")
        normalised = re.sub(r"\s+", " ", text.strip()).lower().rstrip(".")
        return {"task_text.task": text.strip(), "task_text.normalised": normalised}


class FingerprintParams(FrozenModel):
    topics: tuple[str, ...] | None = Field(
        default=None, description="Topics to fingerprint; default: every non-camera topic."
    )


class MessageFingerprint(Annotator):
    """sha256 over (topic, log time, payload) of the non-camera messages, per topic and combined.

    Re-chunking or recompressing a log, or re-encoding its cameras, leaves these bytes as they were, so two
    files with the same combined fingerprint are the same recording.
    """

    name = "message_fingerprint"
    inputs = frozenset({AnnotatorInput.MESSAGES})
    kinds = frozenset({SourceKind.MCAP})
    Params: ClassVar[type[FrozenModel]] = FingerprintParams

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        wanted = self.params.topics
        if wanted is None:
            wanted = tuple(
                sorted(
                    t
                    for t, schema in source.topics.items()
                    if schema != VIDEO_SCHEMA and not t.endswith("/resampled")
                )
            )
        if not wanted:
            raise missing_input(self.name, "no non-camera topic to fingerprint")
        digests = {t: hashlib.sha256() for t in wanted}
        counts = dict.fromkeys(wanted, 0)
        for topic, log_time_ns, payload in source.messages(list(wanted)):
            digest = digests[topic]
            digest.update(log_time_ns.to_bytes(8, "little", signed=True))
            digest.update(len(payload).to_bytes(8, "little"))
            digest.update(payload)
            counts[topic] += 1
        per_topic = {t: d.hexdigest() for t, d in digests.items() if counts[t]}
        if not per_topic:
            raise missing_input(self.name, f"no messages on {', '.join(wanted)}")
        combined = hashlib.sha256("\n".join(f"{t} {h}" for t, h in sorted(per_topic.items())).encode())
        return {
            "message_fingerprint.combined": combined.hexdigest(),
            "message_fingerprint.topics": per_topic,
            "message_fingerprint.messages": sum(counts.values()),
        }
