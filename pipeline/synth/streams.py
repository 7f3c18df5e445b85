"""Timing and kinematics of a synthetic episode's streams, as arrays, before any message is made.

Hardware stamps tick at the nominal rate with a little clock jitter; log times add a jittered transport
delay. Content defects on timing (dropped camera frames aside) are applied here, on the arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipeline.errors import SluiceError
from pipeline.synth import layout
from pipeline.synth.calibration import NS_PER_S

# Transport delays (hardware stamp -> log time), in ns: a fixed part plus a uniform jitter. Each jitter
# stays below its topic's period, so clean log times are monotonic per topic.
CAMERA_DELAY_NS = (6_000_000, 10_000_000)  # encode + USB: 6-16 ms
JOINT_DELAY_NS = (300_000, 1_200_000)  # EtherCAT to host: 0.3-1.5 ms
ACTION_DELAY_NS = (500_000, 2_000_000)  # policy output to logger: 0.5-2.5 ms
# Hardware clock jitter around the nominal period, in ns (cameras are free-running, not triggered).
CAMERA_STAMP_JITTER_NS = 150_000
JOINT_STAMP_JITTER_NS = 20_000
ACTION_STAMP_JITTER_NS = 100_000


class StreamTooShortError(SluiceError, ValueError):
    """An episode is too short to carry the requested timing defect."""

    def __init__(self, messages: int, needed: str) -> None:
        super().__init__(f"a stream of {messages} messages is too short for {needed}; make it longer")


@dataclass
class Stream:
    """One topic's timing: hardware stamps and log times, ns, in send order."""

    stamps: np.ndarray
    log_times: np.ndarray
    sequences: np.ndarray


def timing(
    rng: np.random.Generator, start_ns: int, rate_hz: float, seconds: float, jitter_ns: int, delay_ns: tuple
) -> Stream:
    """Stamps at ``rate_hz`` from a random phase after ``start_ns``, with jitter; log times add a delay."""
    count = max(1, math.floor(seconds * rate_hz))
    period_ns = NS_PER_S / rate_hz
    phase_ns = rng.uniform(0.0, period_ns)
    # Offsets from the start in float64 (exact to well under a ns over hours), the epoch added as an integer:
    # a double at 1.7e18 ns holds only every 256th ns, so stamps computed as one float came out rounded.
    offsets = phase_ns + np.arange(count) * period_ns + rng.uniform(-jitter_ns, jitter_ns, count)
    stamps = np.int64(start_ns) + offsets.astype(np.int64)
    delays = delay_ns[0] + rng.uniform(0.0, delay_ns[1], count)
    return Stream(stamps, stamps + delays.astype(np.int64), np.arange(count, dtype=np.int64))


@dataclass(frozen=True)
class Trajectory:
    """Two sine components per joint; deterministic from the episode rng."""

    center: np.ndarray
    amp: np.ndarray
    hz: np.ndarray
    phase: np.ndarray
    gripper_hz: float

    @classmethod
    def draw(cls, rng: np.random.Generator) -> Trajectory:
        return cls(
            center=rng.uniform(-1.2, 1.2, layout.JOINT_COUNT),
            amp=rng.uniform(0.05, 0.6, (2, layout.JOINT_COUNT)),
            hz=rng.uniform(0.05, 0.6, (2, layout.JOINT_COUNT)),
            phase=rng.uniform(0.0, 2 * np.pi, (2, layout.JOINT_COUNT)),
            gripper_hz=float(rng.uniform(0.05, 0.2)),
        )

    def at(self, t_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions (rad), velocities (rad/s) and gripper opening (0..1) at times ``t_s``."""
        w = 2 * np.pi * self.hz
        arg = w[:, None, :] * t_s[None, :, None] + self.phase[:, None, :]
        pos = self.center + (self.amp[:, None, :] * np.sin(arg)).sum(axis=0)
        vel = (self.amp[:, None, :] * w[:, None, :] * np.cos(arg)).sum(axis=0)
        gripper = np.clip(0.5 + 0.6 * np.sin(2 * np.pi * self.gripper_hz * t_s), 0.0, 1.0)
        return pos, vel, gripper


def apply_clock_jump(stream: Stream, at_ns: int, jump_ns: int) -> int:
    """Shift stamps and log times from ``at_ns`` on (the whole clock stepped); returns messages moved."""
    moved = stream.stamps >= at_ns
    stream.stamps[moved] += jump_ns
    stream.log_times[moved] += jump_ns
    return int(moved.sum())


def apply_backward_steps(stream: Stream, steps: int, rng: np.random.Generator) -> list[int]:
    """Swap the log times of ``steps`` adjacent pairs in the middle of the stream, in send order."""
    n = len(stream.log_times)
    candidates = np.arange(n // 4, 3 * n // 4 - 1, 3)  # every third index: swapped pairs never touch
    if len(candidates) < steps:
        raise StreamTooShortError(n, f"{steps} backward steps")
    chosen = np.sort(rng.choice(candidates, steps, replace=False))
    for i in chosen:
        stream.log_times[[i, i + 1]] = stream.log_times[[i + 1, i]]
    return [int(i) for i in chosen]
