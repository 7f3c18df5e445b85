"""The pre-gate's decisions on real reader reports, without a catalog: one code per problem, named well."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ingest_helpers import ACME, vendor_config

from pipeline.config import VendorConfig, generic_vendor, load_vendor
from pipeline.enums import CheckStatus, FileState, ReasonCode, Severity
from pipeline.mcaplog import read_log
from pipeline.quality.pregate import CheckOutcome, check_mcap, decide, topic_gap_rates
from pipeline.synth.drop import DropManifest

R = ReasonCode


def _gate(
    path: Path, vendor: VendorConfig, calibration_id: int | None = 1
) -> tuple[FileState, set[ReasonCode], str]:
    contract = vendor.topics
    rates = {t.topic: t.rate_hz for t in contract.all_topics()} if contract else {}
    report = read_log(path, expected_rates_hz=rates)
    verdict = decide(check_mcap(report, vendor, calibration_id=calibration_id))
    return verdict.state, set(verdict.reasons), verdict.detail or ""


@pytest.fixture(scope="module")
def acme() -> VendorConfig:
    return load_vendor(ACME)


def _defect(robot_drop: tuple[Path, DropManifest], defect: str) -> Path:
    root, manifest = robot_drop
    return root / manifest.by_defect(defect)[0].path


def test_a_clock_jump_is_reported_as_clock_jump_only(
    robot_drop: tuple[Path, DropManifest], acme: VendorConfig
) -> None:
    path = _defect(robot_drop, "clock_jump")
    state, reasons, detail = _gate(path, acme)
    assert (state, reasons) == (FileState.QUARANTINED, {R.CLOCK_JUMP})
    # the jump is named as a person reads it (the synthetic one: an hour, a message period beyond)
    assert re.search(r"log time jumps on /\S+ 3,600\.\d{3} s", detail), detail
    assert acme.topics is not None
    report = read_log(path, expected_rates_hz={t.topic: t.rate_hz for t in acme.topics.all_topics()})
    rates = [r for r in topic_gap_rates(report, acme).values() if r is not None]
    assert rates and max(rates) < acme.quality.pre.max_gap_rate
    assert any(f.code is R.GAP_RATE_HIGH for f in report.findings)  # what the jump does to a naive count


def test_dropped_frames_are_a_gap(robot_drop: tuple[Path, DropManifest], acme: VendorConfig) -> None:
    state, reasons, detail = _gate(_defect(robot_drop, "dropped_frames"), acme)
    assert (state, reasons) == (FileState.QUARANTINED, {R.GAP_RATE_HIGH})
    assert "/cam/wrist_left/h264" in detail and "/cam/front/h264" not in detail


def test_the_missing_required_topic_is_named(
    robot_drop: tuple[Path, DropManifest], acme: VendorConfig
) -> None:
    state, reasons, detail = _gate(_defect(robot_drop, "missing_topic"), acme)
    assert (state, reasons) == (FileState.QUARANTINED, {R.MISSING_REQUIRED_TOPIC})
    assert "missing required topic(s) /robot/action" in detail
    assert "None" not in detail


def test_an_empty_log_is_accepted_without_topic_contract_and_quarantined_with_one(corpus_dir: Path) -> None:
    empty = corpus_dir / "mcap-conformance" / "NoData.mcap"
    container_only = generic_vendor("mcap", str(corpus_dir))
    assert _gate(empty, container_only)[:2] == (FileState.ACCEPTED, set())
    state, reasons, _ = _gate(empty, load_vendor(ACME), calibration_id=None)
    assert state is FileState.QUARANTINED
    assert {R.NO_MESSAGES, R.MISSING_REQUIRED_TOPIC} <= reasons


def test_a_schema_encoding_that_contradicts_its_message_encoding_is_unsupported(corpus_dir: Path) -> None:
    bag = corpus_dir / "rosbag2" / "rosbag2_tests_resources_mcap_wrong_rmw_test_wrong_rmw_test_0.mcap"
    state, reasons, detail = _gate(bag, generic_vendor("mcap", str(corpus_dir)))
    assert (state, reasons) == (FileState.QUARANTINED, {R.UNSUPPORTED_ENCODING})
    assert "ros2msg schema with message encoding 'wrong_format'" in detail


def test_a_slow_topic_does_not_jump_at_every_message(
    tmp_path: Path, robot_drop: tuple[Path, DropManifest]
) -> None:
    """A 0.5 Hz contract topic steps 2 s between messages: over the 1 s limit, but only 1 period."""
    from ingest_helpers import rewrite

    root, manifest = robot_drop
    clean = root / manifest.by_defect(None)[0].path
    keep: dict[str, int] = {}

    def sparse(topic: str, log_time: int, data: bytes) -> tuple[int, bytes] | None:
        if topic != "/robot/action":
            return log_time, data
        keep[topic] = keep.get(topic, -1) + 1
        return (log_time, data) if keep[topic] % 25 == 0 else None  # 50 Hz -> 2 Hz

    slow = rewrite(clean, tmp_path / "slow.mcap", message_fn=sparse)
    data = load_vendor(ACME).model_dump(mode="json")
    data["topics"]["actions"][0]["rate_hz"] = 2
    data["timestamps"]["max_clock_jump_s"] = 0.3  # below the topic's 0.5 s period
    vendor = vendor_config(data, root)
    state, reasons, _ = _gate(slow, vendor)
    assert R.CLOCK_JUMP not in reasons, reasons
    assert state is FileState.ACCEPTED


def test_decide_lists_the_quarantine_reasons_or_every_flag() -> None:
    flag = CheckOutcome("a", CheckStatus.WARNED, R.ROTATED, Severity.FLAG, detail="turned")
    other = CheckOutcome("b", CheckStatus.WARNED, R.INTERLACED, Severity.FLAG, detail="combed")
    bad = CheckOutcome("c", CheckStatus.FAILED, R.DECODE_ERROR, Severity.QUARANTINE, detail="broken")
    passed = CheckOutcome("d", CheckStatus.PASSED)
    assert decide([passed]).state is FileState.ACCEPTED
    flagged = decide([flag, passed, other])
    assert (flagged.state, flagged.reasons) == (FileState.ACCEPTED_WITH_FLAGS, (R.ROTATED, R.INTERLACED))
    quarantined = decide([flag, bad])
    assert (quarantined.state, quarantined.reasons) == (FileState.QUARANTINED, (R.DECODE_ERROR,))
    assert quarantined.detail == "decode_error: broken"
