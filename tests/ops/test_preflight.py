"""Preflight over recorded nvidia-smi, kernel log, df and runtime outputs."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from ops_fixtures import FIXTURES, H100_NODE, recorded

from pipeline.ops import (
    CHECK_NAMES,
    DRAIN_PREFIX,
    CommandOutput,
    ContainerRuntime,
    PreflightInputs,
    PreflightReport,
    drained_checks,
    evaluate,
)
from pipeline.ops.gpu import parse_gpu_query_csv, parse_nvidia_smi_q
from pipeline.ops.host import parse_xid_events

Inputs = Callable[..., PreflightInputs]


def _result(report: PreflightReport, name: str):
    return next(r for r in report.results if r.name == name)


def test_healthy_node_passes_every_check_with_one_line_each(healthy_inputs: Inputs) -> None:
    report = evaluate("gpu01", healthy_inputs(), H100_NODE)
    assert report.passed, report.lines()
    assert report.exit_code == 0
    assert [r.name for r in report.results] == list(CHECK_NAMES)
    assert all(line.startswith("PASS ") for line in report.lines())
    assert "8 GPU(s): NVIDIA H100 80GB HBM3" in _result(report, "gpu_inventory").reason
    assert report.drain_reason() == ""


def test_volatile_ecc_errors_fail_the_node(healthy_inputs: Inputs) -> None:
    inputs = healthy_inputs(nvidia_smi_q=recorded("h100x8_nvsmi_q_ecc_volatile.txt"))
    report = evaluate("gpu03", inputs, H100_NODE)
    ecc = _result(report, "gpu_ecc")
    assert not ecc.passed and not ecc.transient
    assert "GPU 00000000:5D:00.0 14 corrected ECC error(s) since boot" in ecc.reason
    assert report.exit_code == 1
    assert report.lines()[1].startswith("FAIL gpu_ecc: ")
    assert report.drain_reason().startswith(f"{DRAIN_PREFIX} gpu_ecc: GPU 00000000:5D:00.0")


def test_lifetime_only_ecc_errors_pass_and_are_reported(healthy_inputs: Inputs) -> None:
    inputs = healthy_inputs(nvidia_smi_q=recorded("h100x8_nvsmi_q_ecc_lifetime.txt"))
    ecc = _result(evaluate("gpu02", inputs, H100_NODE), "gpu_ecc")
    assert ecc.passed, ecc.reason
    assert "lifetime (aggregate) counts not gated" in ecc.reason
    assert "GPU 00000000:3A:00.0 418 corrected/1 uncorrected" in ecc.reason
    assert "GPU 00000000:AB:00.0 0 corrected/2 uncorrected" in ecc.reason


def test_a_tolerance_for_corrected_errors_is_honoured(healthy_inputs: Inputs) -> None:
    lenient = H100_NODE.model_copy(update={"max_volatile_corrected_ecc": 20})
    inputs = healthy_inputs(nvidia_smi_q=recorded("h100x8_nvsmi_q_ecc_volatile.txt"))
    assert _result(evaluate("gpu03", inputs, lenient), "gpu_ecc").passed


def test_ecc_parser_reads_both_counter_layouts() -> None:
    modern = parse_nvidia_smi_q((FIXTURES / "h100x8_nvsmi_q_ecc_lifetime.txt").read_text())
    assert len(modern) == 8
    gpu = next(g for g in modern if g.bus_id == "00000000:3A:00.0")
    assert (gpu.volatile_corrected, gpu.volatile_uncorrected) == (0, 0)
    assert (gpu.aggregate_corrected, gpu.aggregate_uncorrected) == (418, 1)
    assert gpu.ecc_mode == "Enabled"

    legacy_text = (FIXTURES / "v100x2_nvsmi_q_ecc_legacy.txt").read_text()
    legacy = parse_nvidia_smi_q(legacy_text)
    # Only the Total lines count: per-unit lines would double the aggregate single-bit count of 3.
    assert [(g.volatile_corrected, g.aggregate_corrected) for g in legacy] == [(0, 3), (0, 0)]
    assert legacy[0].ecc_mode == "Enabled"

    # A double-bit error since boot in the volatile group of the first GPU.
    volatile_dbe = re.sub(
        r"(Double Bit\s*\n(?:.*\n){6}\s*CBU\s*: 0\n\s*Total\s*: )0", r"\g<1>1", legacy_text, count=1
    )
    assert volatile_dbe != legacy_text
    assert parse_nvidia_smi_q(volatile_dbe)[0].volatile_uncorrected == 1


def test_a_missing_gpu_fails(healthy_inputs: Inputs) -> None:
    inputs = healthy_inputs(gpu_query=recorded("h100x7_query_gpu.csv"))
    inventory = _result(evaluate("gpu05", inputs, H100_NODE), "gpu_inventory")
    assert not inventory.passed
    assert inventory.reason == "7 GPU(s) visible, expected 8"


def test_a_gpu_the_driver_cannot_reach_fails_and_is_named(healthy_inputs: Inputs) -> None:
    lost = CommandOutput(
        ("nvidia-smi", "--query-gpu"), 255, (FIXTURES / "h100x8_query_gpu_unreadable.csv").read_text()
    )
    inventory = _result(evaluate("gpu05", healthy_inputs(gpu_query=lost), H100_NODE), "gpu_inventory")
    assert not inventory.passed
    assert "7 GPU(s) visible, expected 8" in inventory.reason
    assert "GPU0000:9A:00.0: Unknown Error" in inventory.reason


def test_the_wrong_gpu_model_fails(healthy_inputs: Inputs) -> None:
    inputs = healthy_inputs(gpu_query=recorded("a100x4_query_gpu.csv"))
    reason = _result(evaluate("gpu09", inputs, H100_NODE), "gpu_inventory").reason
    assert "4 GPU(s) visible, expected 8" in reason
    assert "GPU 0 is 'NVIDIA A100-SXM4-40GB'" in reason


def test_nvidia_smi_failing_outright_fails_closed(healthy_inputs: Inputs) -> None:
    broken = CommandOutput(
        ("nvidia-smi", "-q"),
        9,
        "",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
        "latest NVIDIA driver is installed and running.\n",
    )
    report = evaluate("gpu05", healthy_inputs(gpu_query=broken, nvidia_smi_q=broken), H100_NODE)
    assert {r.name for r in report.failed} == {"gpu_inventory", "gpu_ecc"}
    assert "couldn't communicate with the NVIDIA driver" in _result(report, "gpu_ecc").reason


def test_an_xid_since_boot_fails(healthy_inputs: Inputs) -> None:
    inputs = healthy_inputs(kernel_log=recorded("dmesg_xid79.txt"))
    xid = _result(evaluate("gpu06", inputs, H100_NODE), "gpu_xid")
    assert not xid.passed and not xid.transient
    assert xid.reason.startswith("Xid 79, 154 since boot (2 event(s)); first: Xid 79 on PCI:0000:9a:00")
    assert "GPU has fallen off the bus" in xid.reason


def test_an_xid_of_a_previous_boot_does_not_fail() -> None:
    log_text = (FIXTURES / "journalctl_k_two_boots.txt").read_text()
    assert "Xid (PCI:0000:3a:00): 48" in log_text  # the previous boot had a double-bit error
    assert parse_xid_events(log_text) == []


def test_application_xids_pass_with_a_note(healthy_inputs: Inputs) -> None:
    inputs = healthy_inputs(kernel_log=recorded("dmesg_xid31_app.txt"))
    xid = _result(evaluate("gpu02", inputs, H100_NODE), "gpu_xid")
    assert xid.passed
    assert xid.reason == "only application Xid(s) 31, 43 since boot (not gated)"
    strict = H100_NODE.model_copy(update={"ignored_xids": ()})
    assert not _result(evaluate("gpu02", inputs, strict), "gpu_xid").passed


def test_low_scratch_space_fails_as_transient(healthy_inputs: Inputs) -> None:
    report = evaluate("gpu06", healthy_inputs(df=recorded("df_scratch_low.txt")), H100_NODE)
    disk = _result(report, "disk_free")
    assert not disk.passed and disk.transient
    assert disk.reason == "/scratch (/scratch) has 39.1GiB free, needs 500.0GiB"
    assert drained_checks(report.drain_reason()) == ("disk_free",)


def test_a_stopped_docker_daemon_fails_the_runtime_check(healthy_inputs: Inputs) -> None:
    down = CommandOutput(
        ("docker", "info", "--format", "{{.ServerVersion}}"),
        1,
        "",
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n",
    )
    runtimes = {
        ContainerRuntime.DOCKER: down,
        ContainerRuntime.ENROOT: CommandOutput.ok(("enroot", "version"), "3.5.0\n"),
    }
    runtime = _result(evaluate("gpu02", healthy_inputs(runtimes=runtimes), H100_NODE), "container_runtime")
    assert not runtime.passed and runtime.transient
    assert "docker: `docker info --format {{.ServerVersion}}` exited 1: Cannot connect" in runtime.reason
    assert "enroot" not in runtime.reason


def test_a_cpu_node_needs_no_gpu_commands() -> None:
    from pipeline.ops import PreflightConfig

    cpu_node = PreflightConfig.model_validate({"min_free_bytes": {"/": "1 GiB"}})
    inputs = PreflightInputs(df=recorded("df_healthy.txt"))
    report = evaluate("cpu01", inputs, cpu_node)
    assert report.passed, report.lines()


def test_unparseable_query_output_fails_instead_of_passing(healthy_inputs: Inputs) -> None:
    garbage = CommandOutput.ok(("nvidia-smi",), "index, name\n0, NVIDIA H100, extra\n")
    inventory = _result(evaluate("gpu01", healthy_inputs(gpu_query=garbage), H100_NODE), "gpu_inventory")
    assert not inventory.passed
    assert "a row has 3 fields, the header 2" in inventory.reason


@pytest.mark.parametrize("name", ["h100x8_query_gpu.csv", "a100x4_query_gpu.csv"])
def test_query_csv_maps_columns_by_header(name: str) -> None:
    gpus = parse_gpu_query_csv((FIXTURES / name).read_text())
    assert [g.index for g in gpus] == list(range(len(gpus)))
    assert all(g.uuid.startswith("GPU-") and g.bus_id.startswith("00000000:") for g in gpus)
