"""Self-healing sweeps: resume nodes drained for a transient reason once healthy, release stale reservations.

Planning is pure (:func:`plan_node_resumes`, :func:`plan_reservation_releases` take parsed ``scontrol``
output and preflight reports); :func:`apply` runs the planned ``scontrol`` commands through a runner, or in
dry-run mode only logs them. Every decision, taken or not, is logged with its reason, so that the sweep's
log answers "why was gpu07 resumed at 03:10?" and "why is gpu03 still drained?".

The sweeps are conservative by construction: a node is resumed only when its drain reason is on the
transient list (or names only transient preflight checks), the drain was set by the controller or root
(never by a person), no reboot or maintenance is pending, and its preflight passes now. A reservation is
released only when the controller's accounts own it, its name carries the automation's prefix, and it
has ended or none of its nodes exists any more.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pipeline.ops.config import SweepPolicy
from pipeline.ops.model import CommandOutput, PreflightReport, drained_checks
from pipeline.ops.preflight import TRANSIENT_CHECKS
from pipeline.ops.slurm import Reservation, SlurmNode

log = logging.getLogger(__name__)

#: Node flags under which a resume would fight another process (a reboot queued by an admin or by
#: ``scontrol reboot``, a maintenance reservation, power saving).
BLOCKING_FLAGS = frozenset(
    {"MAINT", "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"}
)

#: ``(argv, timeout_s) -> CommandOutput``: how a sweep runs ``scontrol`` (see :mod:`pipeline.ops.runners`).
CommandRunner = Callable[[Sequence[str], float], CommandOutput]

#: scontrol update/delete answer in well under a second; 30 s covers a controller busy after a restart.
SCONTROL_TIMEOUT_S = 30.0


class ActionKind(StrEnum):
    RESUME_NODE = "resume_node"
    RELEASE_RESERVATION = "release_reservation"


@dataclass(frozen=True)
class Decision:
    """What the sweep decided for one drained node or one reservation, and why; ``argv`` is empty if kept."""

    kind: ActionKind
    target: str
    act: bool
    why: str
    argv: tuple[str, ...] = ()


class OutcomeStatus(StrEnum):
    DONE = "done"
    FAILED = "failed"
    DRY_RUN = "dry_run"
    KEPT = "kept"


@dataclass(frozen=True)
class Outcome:
    decision: Decision
    status: OutcomeStatus
    detail: str = ""

    def line(self) -> str:
        d = self.decision
        verb = {"resume_node": "resume", "release_reservation": "release"}[d.kind.value]
        action = f"{verb} {d.target}" if d.act else d.target
        head = f"{self.status.value.upper()} {action}: {d.why}"
        return f"{head} ({self.detail})" if self.detail else head


def is_transient(reason: str, policy: SweepPolicy) -> bool:
    """Whether a drain reason is one that can clear without hardware work."""
    checks = drained_checks(reason)
    if checks is not None:
        return all(name in TRANSIENT_CHECKS for name in checks)
    return any(re.match(pattern, reason, re.IGNORECASE) for pattern in policy.transient_reasons)


def plan_node_resumes(
    nodes: Iterable[SlurmNode], health: Mapping[str, PreflightReport], policy: SweepPolicy
) -> list[Decision]:
    """A decision for every drained node: resume it, or keep it drained and say why."""
    decisions = []
    for node in nodes:
        if not node.drained:
            continue

        def keep(why: str, node: SlurmNode = node) -> Decision:
            return Decision(ActionKind.RESUME_NODE, node.name, False, why)

        blocking = sorted(node.flags & BLOCKING_FLAGS)
        report = health.get(node.name)
        if blocking:
            decisions.append(keep(f"{'+'.join(blocking)} pending"))
        elif node.reason_user not in policy.resume_setters:
            decisions.append(
                keep(f"drained by {node.reason_user or 'an unknown user'} ({node.reason!r}); left to them")
            )
        elif not is_transient(node.reason, policy):
            decisions.append(keep(f"reason {node.reason!r} is not transient"))
        elif report is None:
            decisions.append(keep("no preflight result for this node"))
        elif not report.passed:
            failed = "; ".join(f"{r.name}: {r.reason}" for r in report.failed)
            decisions.append(keep(f"preflight still fails: {failed}"))
        else:
            decisions.append(
                Decision(
                    ActionKind.RESUME_NODE,
                    node.name,
                    True,
                    f"drained for {node.reason!r} by {node.reason_user}; preflight passes",
                    ("scontrol", "update", f"NodeName={node.name}", "State=RESUME"),
                )
            )
    return decisions


def plan_reservation_releases(
    reservations: Iterable[Reservation], existing_nodes: Iterable[str], policy: SweepPolicy, now: datetime
) -> list[Decision]:
    """A decision for every reservation: release it when stale, keep it otherwise.

    Stale: owned by the controller (every user in ``reservation_owners``, name with one of
    ``reservation_prefixes``) and either ended (``EndTime`` at or before ``now``, which is the controller's
    local time like scontrol's) or orphaned (it holds no node that still exists).
    """
    known = set(existing_nodes)
    decisions = []
    for res in reservations:

        def keep(why: str, res: Reservation = res) -> Decision:
            return Decision(ActionKind.RELEASE_RESERVATION, res.name, False, why)

        owned = bool(res.users) and set(res.users) <= set(policy.reservation_owners)
        if not owned or not res.name.startswith(tuple(policy.reservation_prefixes)):
            decisions.append(keep(f"not the controller's (users {','.join(res.users) or 'none'})"))
            continue
        live_nodes = [n for n in res.nodes if n in known]
        if res.end is not None and res.end <= now:
            why = f"ended at {res.end.isoformat()}"
        elif not live_nodes:
            gone = ",".join(res.nodes) or "no nodes"
            why = f"orphaned: none of its nodes exists ({gone})"
        else:
            until = res.end.isoformat() if res.end else "no end"
            decisions.append(keep(f"live until {until} on {len(live_nodes)} node(s)"))
            continue
        decisions.append(
            Decision(
                ActionKind.RELEASE_RESERVATION,
                res.name,
                True,
                why,
                ("scontrol", "delete", f"ReservationName={res.name}"),
            )
        )
    return decisions


def apply(decisions: Sequence[Decision], runner: CommandRunner, *, dry_run: bool) -> list[Outcome]:
    """Carry out the decisions that act (only log them when ``dry_run``); log every decision."""
    outcomes = []
    for decision in decisions:
        if not decision.act:
            outcome = Outcome(decision, OutcomeStatus.KEPT)
        elif dry_run:
            outcome = Outcome(decision, OutcomeStatus.DRY_RUN, f"would run: {' '.join(decision.argv)}")
        else:
            result = runner(decision.argv, SCONTROL_TIMEOUT_S)
            if result.succeeded:
                outcome = Outcome(decision, OutcomeStatus.DONE, " ".join(decision.argv))
            else:
                outcome = Outcome(decision, OutcomeStatus.FAILED, result.failure())
        level = logging.ERROR if outcome.status is OutcomeStatus.FAILED else logging.INFO
        log.log(level, "sweep: %s", outcome.line())
        outcomes.append(outcome)
    return outcomes
