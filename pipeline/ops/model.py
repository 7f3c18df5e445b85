"""What every preflight check and sweep works on: a command's recorded output, one check's verdict, a report.

Checks are pure functions of recorded command output, so that tests feed them text captured on real nodes
and the runner (:mod:`pipeline.ops.runners`) is the only place that executes anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.errors import InfrastructureError

#: Prefix of every drain reason the preflight writes; the node sweep recognises its own drains by it.
DRAIN_PREFIX = "sluice-preflight:"

#: Exit status of a failed preflight. Slurm's HealthCheckProgram contract is "non-zero means unhealthy";
#: 1 is kept for "a check failed" so that 2 (the CLI's usage or config error) stays distinguishable.
EXIT_UNHEALTHY = 1


class OpsError(InfrastructureError):
    """A node-operations fault: a command that cannot be run or whose output cannot be read."""


class CommandOutputError(OpsError):
    """A command's output does not have the shape its parser expects."""

    def __init__(self, command: str, problem: str, excerpt: str = "") -> None:
        self.command = command
        self.problem = problem
        shown = f" (near {excerpt[:80]!r})" if excerpt else ""
        super().__init__(f"cannot read the output of `{command}`: {problem}{shown}")


@dataclass(frozen=True)
class CommandOutput:
    """One command's result as recorded: argv, exit status and both streams."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str = ""

    @classmethod
    def ok(cls, argv: Sequence[str], stdout: str) -> CommandOutput:
        """A successful run (exit 0) that printed ``stdout``: how tests wrap a recorded fixture."""
        return cls(tuple(argv), 0, stdout)

    @property
    def command(self) -> str:
        return " ".join(self.argv)

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0

    def failure(self) -> str:
        """Why the command failed, in one line: its first stderr (or stdout) line and exit status."""
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        first = text[0].strip() if text else "no output"
        return f"`{self.command}` exited {self.returncode}: {first}"


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check.

    ``transient`` says whether a failure of this kind can clear without hardware work (a full disk is
    cleaned, a daemon restarts); the node sweep resumes only nodes drained for transient failures.
    """

    name: str
    passed: bool
    reason: str
    transient: bool = False

    def line(self) -> str:
        """One line for the health-check log: ``PASS gpu_ecc: ...`` or ``FAIL disk_free: ...``."""
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.reason}"


@dataclass(frozen=True)
class PreflightReport:
    """All checks of one node; the node is healthy when every check passed."""

    node: str
    results: tuple[CheckResult, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(result for result in self.results if not result.passed)

    @property
    def exit_code(self) -> int:
        """0 when healthy, :data:`EXIT_UNHEALTHY` otherwise."""
        return 0 if self.passed else EXIT_UNHEALTHY

    def lines(self) -> list[str]:
        return [result.line() for result in self.results]

    def drain_reason(self, max_chars: int = 200) -> str:
        """The reason to drain with: the prefix, the failed checks' names, then the first failure's reason.

        The names come first and are comma-separated without spaces so that :func:`drained_checks` can
        read them back; the reason is cut to ``max_chars`` because Slurm shows it in one ``sinfo`` column.
        """
        failed = self.failed
        if not failed:
            return ""
        names = ",".join(result.name for result in failed)
        return f"{DRAIN_PREFIX} {names}: {failed[0].reason}"[:max_chars]

    def to_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "passed": self.passed,
            "checks": [
                {"name": r.name, "passed": r.passed, "reason": r.reason, "transient": r.transient}
                for r in self.results
            ],
        }


def drained_checks(reason: str) -> tuple[str, ...] | None:
    """The check names of a drain reason written by :meth:`PreflightReport.drain_reason`, else ``None``."""
    if not reason.startswith(DRAIN_PREFIX):
        return None
    head = reason[len(DRAIN_PREFIX) :].strip().split(":", 1)[0]
    names = tuple(name for name in head.split(",") if name)
    return names or None
