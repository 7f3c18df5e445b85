"""The node preflight: every check over one node's recorded command outputs, one line per check.

:func:`evaluate` is pure (tests give it recorded outputs); :func:`pipeline.ops.runners.collect_inputs` runs
the real commands on a node. Used as Slurm's ``HealthCheckProgram`` through ``sluice ops preflight
--drain-on-fail``: Slurm acts on nothing by itself, so the program drains its own node with the reason
:meth:`PreflightReport.drain_reason` and exits non-zero.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pipeline.ops.config import ContainerRuntime, PreflightConfig
from pipeline.ops.gpu import check_gpu_ecc, check_gpu_inventory
from pipeline.ops.host import check_container_runtimes, check_disk_free, check_xid
from pipeline.ops.model import CheckResult, CommandOutput, PreflightReport

log = logging.getLogger(__name__)

#: The checks in the order they are reported. Names are stable: drain reasons and the sweep use them.
CHECK_NAMES = ("gpu_inventory", "gpu_ecc", "gpu_xid", "disk_free", "container_runtime")
#: Checks whose failure can clear without hardware work; a node drained only for these may be resumed.
TRANSIENT_CHECKS = frozenset({"disk_free", "container_runtime"})


@dataclass(frozen=True)
class PreflightInputs:
    """One node's recorded command outputs; ``None`` where a command was not run."""

    gpu_query: CommandOutput | None = None
    nvidia_smi_q: CommandOutput | None = None
    kernel_log: CommandOutput | None = None
    df: CommandOutput | None = None
    runtimes: dict[ContainerRuntime, CommandOutput] = field(default_factory=dict)


def evaluate(node: str, inputs: PreflightInputs, config: PreflightConfig) -> PreflightReport:
    """Run every check over ``inputs``; a check that cannot read its input fails (fail closed)."""
    results: list[CheckResult] = [
        check_gpu_inventory(inputs.gpu_query, config),
        check_gpu_ecc(inputs.nvidia_smi_q, config),
        check_xid(inputs.kernel_log, config),
        check_disk_free(inputs.df, config),
        check_container_runtimes(inputs.runtimes, config),
    ]
    report = PreflightReport(node=node, results=tuple(results))
    # DEBUG only: the caller reports the result (``ops preflight`` prints every line, a sweep's decision
    # names each failure), so a warning here would say every failure twice
    for result in report.results:
        log.debug("%s: %s", node, result.line())
    return report
