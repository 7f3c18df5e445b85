"""The only part of :mod:`pipeline.ops` that executes commands: collect a node's preflight inputs, read
``scontrol`` output, and run ``scontrol`` updates.

Everything here returns :class:`CommandOutput` records (a missing binary is exit 127, a timeout exit 124,
as a shell reports them), so that the checks see the same shape whether the output was recorded on a
node for a test or captured just now.
"""

from __future__ import annotations

import logging
import socket
import subprocess
from collections.abc import Sequence

from pipeline.ops.config import ContainerRuntime, PreflightConfig
from pipeline.ops.gpu import GPU_QUERY_FIELDS
from pipeline.ops.model import CommandOutput, OpsError
from pipeline.ops.preflight import PreflightInputs
from pipeline.ops.slurm import Reservation, SlurmNode, parse_nodes, parse_reservations
from pipeline.ops.sweeps import SCONTROL_TIMEOUT_S, CommandRunner

log = logging.getLogger(__name__)

#: How each runtime is asked whether it works. Docker's client alone proves nothing: ``docker info``
#: needs the daemon. The NVIDIA toolkit's CLI answers only when its libraries are installed.
RUNTIME_PROBES: dict[ContainerRuntime, tuple[str, ...]] = {
    ContainerRuntime.DOCKER: ("docker", "info", "--format", "{{.ServerVersion}}"),
    ContainerRuntime.PODMAN: ("podman", "--version"),
    ContainerRuntime.ENROOT: ("enroot", "version"),
    ContainerRuntime.APPTAINER: ("apptainer", "--version"),
    ContainerRuntime.NVIDIA_CONTAINER_TOOLKIT: ("nvidia-ctk", "--version"),
}


def run_command(argv: Sequence[str], timeout_s: float) -> CommandOutput:
    """Run ``argv`` without a shell and record its result; never raises for the command's own failure."""
    args = tuple(argv)
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return CommandOutput(args, 127, "", f"{args[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandOutput(args, 124, "", f"timed out after {timeout_s:g} s")
    except OSError as exc:
        return CommandOutput(args, 126, "", f"{args[0]}: {exc.strerror or exc}")
    return CommandOutput(args, done.returncode, done.stdout, done.stderr)


def local_node_name() -> str:
    """This host's short name, which is what Slurm calls it unless ``NodeHostName`` says otherwise."""
    return socket.gethostname().split(".", 1)[0]


def collect_inputs(config: PreflightConfig, runner: CommandRunner = run_command) -> PreflightInputs:
    """Run every command the configured checks need on this node."""
    timeout = config.command_timeout_s
    gpu_query = nvidia_smi_q = kernel_log = None
    if config.expected_gpu_count:
        gpu_query = runner(
            ("nvidia-smi", f"--query-gpu={','.join(GPU_QUERY_FIELDS)}", "--format=csv,nounits"), timeout
        )
        nvidia_smi_q = runner(("nvidia-smi", "-q", "-d", "ECC,PAGE_RETIREMENT,ROW_REMAPPER"), timeout)
        # The journal of the current boot only; dmesg holds only the current boot by nature.
        kernel_log = runner(("journalctl", "-k", "-b", "0", "--no-pager", "-q"), timeout)
        if not kernel_log.succeeded:
            kernel_log = runner(("dmesg",), timeout)
    df = None
    if config.min_free_bytes:
        df = runner(("df", "-B1", "--output=file,size,avail,target", *sorted(config.min_free_bytes)), timeout)
    runtimes = {rt: runner(RUNTIME_PROBES[rt], timeout) for rt in config.container_runtimes}
    return PreflightInputs(gpu_query, nvidia_smi_q, kernel_log, df, runtimes)


def drain_node(node: str, reason: str, runner: CommandRunner = run_command) -> CommandOutput:
    """Drain ``node`` with ``reason`` (what a HealthCheckProgram must do itself: Slurm does not)."""
    result = runner(
        ("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"), SCONTROL_TIMEOUT_S
    )
    if result.succeeded:
        log.warning("drained %s: %s", node, reason)
    else:
        log.error("could not drain %s: %s", node, result.failure())
    return result


def read_nodes(runner: CommandRunner = run_command, node: str | None = None) -> list[SlurmNode]:
    """``scontrol show node [NAME]``, parsed; raises :class:`OpsError` when scontrol fails."""
    argv = ("scontrol", "show", "node", *([node] if node else []))
    return parse_nodes(_checked(runner(argv, SCONTROL_TIMEOUT_S)).stdout)


def read_reservations(runner: CommandRunner = run_command) -> list[Reservation]:
    """``scontrol show reservation``, parsed; raises :class:`OpsError` when scontrol fails."""
    return parse_reservations(
        _checked(runner(("scontrol", "show", "reservation"), SCONTROL_TIMEOUT_S)).stdout
    )


def _checked(result: CommandOutput) -> CommandOutput:
    if not result.succeeded:
        raise OpsError(result.failure())
    return result
