"""Node operations: preflight health checks and self-healing sweeps for GPU clusters (pure Python).

* :func:`evaluate` turns one node's recorded command outputs (``nvidia-smi``, the kernel log, ``df``,
  container runtime probes) into a :class:`PreflightReport`: one line per check, an exit status for
  Slurm's ``HealthCheckProgram``, a drain reason.
* :func:`plan_node_resumes` and :func:`plan_reservation_releases` decide, from parsed ``scontrol`` output,
  which drained nodes to resume and which reservations to release; :func:`apply` carries the decisions out
  (or only logs them in dry-run mode).
* :mod:`pipeline.ops.runners` runs the real commands; nothing else here executes anything.
"""

from pipeline.ops.config import ContainerRuntime, OpsConfig, PreflightConfig, SweepPolicy, load_ops_config
from pipeline.ops.model import (
    DRAIN_PREFIX,
    CheckResult,
    CommandOutput,
    CommandOutputError,
    OpsError,
    PreflightReport,
    drained_checks,
)
from pipeline.ops.preflight import CHECK_NAMES, TRANSIENT_CHECKS, PreflightInputs, evaluate
from pipeline.ops.slurm import Reservation, SlurmNode, expand_hostlist, parse_nodes, parse_reservations
from pipeline.ops.sweeps import (
    ActionKind,
    Decision,
    Outcome,
    OutcomeStatus,
    apply,
    is_transient,
    plan_node_resumes,
    plan_reservation_releases,
)

__all__ = [
    "CHECK_NAMES",
    "DRAIN_PREFIX",
    "TRANSIENT_CHECKS",
    "ActionKind",
    "CheckResult",
    "CommandOutput",
    "CommandOutputError",
    "ContainerRuntime",
    "Decision",
    "OpsConfig",
    "OpsError",
    "Outcome",
    "OutcomeStatus",
    "PreflightConfig",
    "PreflightInputs",
    "PreflightReport",
    "Reservation",
    "SlurmNode",
    "SweepPolicy",
    "apply",
    "drained_checks",
    "evaluate",
    "expand_hostlist",
    "is_transient",
    "load_ops_config",
    "parse_nodes",
    "parse_reservations",
    "plan_node_resumes",
    "plan_reservation_releases",
]
