"""Timing arithmetic of the pre-gate: per-topic clock-jump limits, and gap rates with the jump taken out.

A clock jump stretches an episode's span: counted naively, every topic would then also seem to miss most
of its messages. The gate reports the jump once (``clock_jump``) and measures gaps, and the duration, over
the span without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.config import VendorConfig
    from pipeline.mcaplog import LogReport, TopicStats

#: A step between consecutive messages is a clock jump only if it also exceeds this many periods of the
#: topic (its contract rate, else its median interval): a 0.5 Hz topic then does not "jump" every message,
#: while a 30 Hz camera still jumps at the vendor's limit (1 s = 30 periods by default).
CLOCK_JUMP_MIN_PERIODS = 10.0

#: Messages a complete stream may lack against the episode's span: one period of phase at each end.
PHASE_ALLOWANCE_MESSAGES = 2


def jump_limits_ns(report: LogReport, vendor: VendorConfig) -> dict[str, int]:
    """Per topic: the largest step between consecutive log times that is not a clock jump."""
    max_jump_ns = int(vendor.timestamps.max_clock_jump_s * 1e9)
    return {t.topic: jump_limit_ns(t, max_jump_ns) for t in report.topics}


def topic_gap_rates(report: LogReport, vendor: VendorConfig) -> dict[str, float | None]:
    """Gap rate of every contract topic with a rate, over the episode's span less any clock jump."""
    contract = {spec.topic for spec in vendor.topics.all_topics()} if vendor.topics else set()
    excess_ns = timeline_jump_excess_ns(report.topics, jump_limits_ns(report, vendor), contract)
    return {
        t.topic: gap_rate(t, report.start_ns, report.end_ns, excess_ns)
        for t in report.topics
        if t.topic in contract
    }


def jump_limit_ns(topic: TopicStats, max_clock_jump_ns: int) -> int:
    """The largest step between consecutive log times of ``topic`` that is not a clock jump."""
    period_ns = (
        1e9 / topic.expected_rate_hz if topic.expected_rate_hz else float(topic.median_interval_ns or 0)
    )
    return int(max(max_clock_jump_ns, CLOCK_JUMP_MIN_PERIODS * period_ns))


def timeline_jump_excess_ns(
    topics: Sequence[TopicStats], limits: Mapping[str, int], contract_topics: set[str]
) -> int:
    """How much a clock jump stretched the episode's span: the largest jump of a contract topic beyond
    its own period (0 when no contract topic jumped).

    Only contract topics count: their rate says what a normal step is, while an event topic's long silence
    is no evidence about the clock. Only the largest jump per topic is known, so two separate jumps in one
    file are taken out once.
    """
    excess = 0
    for t in topics:
        if t.topic in contract_topics and t.largest_jump_ns > limits[t.topic] and t.expected_rate_hz:
            excess = max(excess, int(t.largest_jump_ns - 1e9 / t.expected_rate_hz))
    return excess


def gap_rate(topic: TopicStats, start_ns: int | None, end_ns: int | None, excess_ns: int) -> float | None:
    """Share of the messages expected at the contract rate over the episode's span that are missing.

    The span is the whole episode's (a stream that starts late or stops early is missing messages) with
    any clock jump taken out, so that a jumped timeline is reported as ``clock_jump`` only.
    """
    rate = topic.expected_rate_hz
    if not rate or start_ns is None or end_ns is None:
        return None
    span_ns = max(0, end_ns - start_ns - excess_ns)
    expected = math.floor(span_ns / 1e9 * rate) + 1
    # The episode's span is set by all topics together: a complete stream may start up to one period
    # after the episode and end up to one period before it (its phase), so two messages are not missing.
    missing = max(0, expected - PHASE_ALLOWANCE_MESSAGES - topic.message_count)
    return missing / expected
