"""Sweeps over recorded ``scontrol show node`` / ``scontrol show reservation`` output."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from ops_fixtures import FIXTURES, H100_NODE, recorded

from pipeline.ops import (
    OutcomeStatus,
    PreflightInputs,
    SweepPolicy,
    apply,
    evaluate,
    expand_hostlist,
    parse_nodes,
    parse_reservations,
    plan_node_resumes,
    plan_reservation_releases,
)
from pipeline.ops.runners import run_command

Inputs = Callable[..., PreflightInputs]
POLICY = SweepPolicy()
#: The controller's local time when the fixtures were recorded.
NOW = datetime(2025, 3, 2, 9, 30)


@pytest.fixture
def nodes():
    return parse_nodes((FIXTURES / "scontrol_show_node.txt").read_text())


@pytest.fixture
def reservations():
    return parse_reservations((FIXTURES / "scontrol_show_reservation.txt").read_text())


def test_scontrol_node_records_parse_states_flags_and_reason_setters(nodes) -> None:
    by_name = {n.name: n for n in nodes}
    assert sorted(by_name) == [f"gpu0{i}" for i in range(1, 9)]
    assert not by_name["gpu01"].drained and by_name["gpu01"].reason == ""
    gpu02 = by_name["gpu02"]
    assert (gpu02.state, gpu02.flags, gpu02.drained) == ("IDLE", frozenset({"DRAIN"}), True)
    assert (gpu02.reason, gpu02.reason_user) == ("Kill task failed", "slurm")
    assert gpu02.reason_time == datetime(2025, 3, 2, 3, 14, 7)
    assert by_name["gpu04"].reason_user == "alice"
    assert by_name["gpu08"].flags == {"DRAIN", "NOT_RESPONDING"}


def test_a_transiently_drained_node_is_resumed_once_healthy(
    nodes, healthy_inputs: Inputs, caplog: pytest.LogCaptureFixture
) -> None:
    healthy = {
        name: evaluate(name, healthy_inputs(), H100_NODE) for name in ("gpu02", "gpu03", "gpu04", "gpu06")
    }
    # gpu05 stopped answering and is back, but its scratch is still full: not yet.
    healthy["gpu05"] = evaluate("gpu05", healthy_inputs(df=recorded("df_scratch_low.txt")), H100_NODE)
    healthy["gpu07"] = evaluate("gpu07", healthy_inputs(), H100_NODE)
    decisions = {d.target: d for d in plan_node_resumes(nodes, healthy, POLICY)}

    assert "gpu01" not in decisions  # not drained: nothing to decide
    assert {name for name, d in decisions.items() if d.act} == {"gpu02", "gpu06"}
    assert decisions["gpu02"].argv == ("scontrol", "update", "NodeName=gpu02", "State=RESUME")
    # gpu06 was drained by our own preflight for disk space only, which is transient.
    assert decisions["gpu06"].why.startswith("drained for 'sluice-preflight: disk_free")
    # Hardware drain (ECC) stays, even though the node looks healthy now.
    assert (
        decisions["gpu03"].why
        == "reason 'sluice-preflight: gpu_ecc: GPU 00000000:5D:00.0 14 corrected ECC error(s) since boot' is not transient"
    )
    assert "drained by alice" in decisions["gpu04"].why
    assert decisions["gpu05"].why == (
        "preflight still fails: disk_free: /scratch (/scratch) has 39.1GiB free, needs 500.0GiB"
    )
    assert decisions["gpu07"].why == "REBOOT_REQUESTED pending"
    assert decisions["gpu08"].why == "no preflight result for this node"

    caplog.set_level(logging.INFO, logger="pipeline.ops.sweeps")
    outcomes = apply(list(decisions.values()), _refuse_to_run, dry_run=True)
    assert {o.decision.target for o in outcomes if o.status is OutcomeStatus.DRY_RUN} == {"gpu02", "gpu06"}
    logged = [r.getMessage() for r in caplog.records if r.name == "pipeline.ops.sweeps"]
    assert len(logged) == len(decisions)  # every decision, taken or not, is logged
    assert "sweep: DRY_RUN resume gpu02: " in "\n".join(logged)
    assert any(m.startswith("sweep: KEPT gpu03: reason") for m in logged)


def test_the_transient_list_decides_which_slurm_reasons_resume(nodes, healthy_inputs: Inputs) -> None:
    healthy = {n.name: evaluate(n.name, healthy_inputs(), H100_NODE) for n in nodes}
    default = {d.target for d in plan_node_resumes(nodes, healthy, POLICY) if d.act}
    assert default == {"gpu02", "gpu05", "gpu06", "gpu08"}
    narrow = SweepPolicy(transient_reasons=("Kill task failed",))
    kept = {d.target: d.why for d in plan_node_resumes(nodes, healthy, narrow) if not d.act}
    assert kept["gpu05"] == kept["gpu08"] == "reason 'Not responding' is not transient"


def test_a_stale_reservation_is_released_and_a_live_one_kept(nodes, reservations) -> None:
    existing = [n.name for n in nodes]
    decisions = {d.target: d for d in plan_reservation_releases(reservations, existing, POLICY, NOW)}
    assert {name for name, d in decisions.items() if d.act} == {"sluice_maint_gpu03", "sluice_drain_rack4"}
    assert decisions["sluice_maint_gpu03"].why == "ended at 2025-03-02T02:00:00"
    assert decisions["sluice_maint_gpu03"].argv == (
        "scontrol",
        "delete",
        "ReservationName=sluice_maint_gpu03",
    )
    assert decisions["sluice_drain_rack4"].why == "orphaned: none of its nodes exists (gpu11,gpu12)"
    assert decisions["sluice_maint_gpu05"].why == "live until 2025-03-02T12:30:00 on 1 node(s)"
    # Someone else's reservation and a root one without the automation's prefix are never touched.
    assert not decisions["vla_eval_alice"].act and "alice,bob" in decisions["vla_eval_alice"].why
    assert not decisions["root_hold"].act


def test_no_reservations_in_the_system_means_nothing_to_do() -> None:
    assert parse_reservations("No reservations in the system\n") == []


def test_hostlists_expand_like_scontrol_show_hostnames() -> None:
    assert expand_hostlist("gpu[01-03,07],cpu1") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]
    assert expand_hostlist("r[1-2]n[8-9]") == ["r1n8", "r1n9", "r2n8", "r2n9"]
    assert expand_hostlist("node[098-101]") == ["node098", "node099", "node100", "node101"]


def test_apply_runs_scontrol_and_records_failures(
    nodes, reservations, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real subprocess runner, against a stand-in ``scontrol`` that logs its arguments and
    refuses one reservation as the real one does for a name it does not know."""
    calls = tmp_path / "calls.txt"
    stub = tmp_path / "bin" / "scontrol"
    stub.parent.mkdir()
    stub.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{calls}"\n'
        'case "$*" in *sluice_drain_rack4*) echo "Error deleting the reservation: Invalid reservation name '
        'specified" >&2; exit 1;; esac\n'
    )
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{stub.parent}{os.pathsep}{os.environ['PATH']}")

    decisions = plan_reservation_releases(reservations, [n.name for n in nodes], POLICY, NOW)
    outcomes = {o.decision.target: o for o in apply(decisions, run_command, dry_run=False)}
    assert calls.read_text().splitlines() == [
        "delete ReservationName=sluice_maint_gpu03",
        "delete ReservationName=sluice_drain_rack4",
    ]
    assert outcomes["sluice_maint_gpu03"].status is OutcomeStatus.DONE
    assert outcomes["sluice_drain_rack4"].status is OutcomeStatus.FAILED
    assert "Invalid reservation name" in outcomes["sluice_drain_rack4"].detail
    assert outcomes["sluice_maint_gpu05"].status is OutcomeStatus.KEPT


def test_dry_run_runs_nothing(nodes, reservations) -> None:
    decisions = plan_reservation_releases(reservations, [n.name for n in nodes], POLICY, NOW)
    outcomes = apply(decisions, _refuse_to_run, dry_run=True)
    released = [o for o in outcomes if o.status is OutcomeStatus.DRY_RUN]
    assert [o.decision.target for o in released] == ["sluice_maint_gpu03", "sluice_drain_rack4"]
    assert released[0].detail == "would run: scontrol delete ReservationName=sluice_maint_gpu03"


def _refuse_to_run(argv, timeout_s):  # a runner that must never be called
    raise AssertionError(f"dry run executed {argv}")
