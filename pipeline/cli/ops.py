"""``sluice ops``: node preflight (a Slurm HealthCheckProgram) and the self-healing sweeps.

``preflight`` prints one line per check and exits 0 (healthy) or 1 (a check failed); with
``--drain-on-fail`` it also drains its own node, which is what Slurm expects of a health-check program.
``sweep nodes`` resumes this node if it was drained for a transient reason and passes preflight now;
``sweep reservations`` (on the controller) releases the controller's stale reservations. Both sweeps log
every decision and take ``--dry-run``. The settings come from ``--config`` (the file the Ansible
``preflight`` role renders from the cluster's inventory).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from pipeline.ops import Outcome

app = typer.Typer(
    no_args_is_help=True, help="Node operations: preflight health checks and self-healing sweeps."
)
sweep_app = typer.Typer(no_args_is_help=True, help="Self-healing sweeps (run them on a timer).")
app.add_typer(sweep_app, name="sweep")

#: Where the Ansible preflight role puts the node's ops config.
DEFAULT_CONFIG = Path("/etc/sluice/ops.yaml")
#: The example shipped with the repository (an 8-GPU node), relative to the project root.
EXAMPLE_CONFIG = Path("docs/examples/ops.yaml")

ConfigOption = Annotated[
    Path,
    typer.Option("--config", "-c", help=f"The node's ops YAML file (example: {EXAMPLE_CONFIG}, commented)."),
]


def _node_name(value: str | None) -> str | None:
    if value is not None and not value.strip():  # it stood for this host's name without a word
        raise typer.BadParameter("an empty node name; leave --node out for this host's short name")
    return value


NodeOption = Annotated[
    str | None,
    typer.Option(
        "--node", callback=_node_name, help="Slurm node name of this host (default: the short host name)."
    ),
]
DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Decide and log, but change nothing.")]


@app.command()
def preflight(
    config: ConfigOption = DEFAULT_CONFIG,
    node: NodeOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    drain_on_fail: Annotated[
        bool, typer.Option("--drain-on-fail", help="Drain this node in Slurm when a check fails.")
    ] = False,
) -> None:
    """Check this node (GPUs, ECC since boot, Xid since boot, disk, container runtimes); exit 1 if unhealthy."""
    from pipeline.ops import evaluate
    from pipeline.ops.runners import collect_inputs, drain_node, local_node_name

    ops = _load(config)
    name = node or local_node_name()
    report = evaluate(name, collect_inputs(ops.preflight), ops.preflight)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_lines(report.lines())
    if drain_on_fail and not report.passed:
        drained = drain_node(name, report.drain_reason())
        if not drained.succeeded:
            _print_lines([f"ERROR could not drain {name}: {drained.failure()}"])
    raise typer.Exit(report.exit_code)


@sweep_app.command("nodes")
def sweep_nodes(
    config: ConfigOption = DEFAULT_CONFIG, node: NodeOption = None, dry_run: DryRunOption = False
) -> None:
    """Resume this node if it is drained for a transient reason and passes preflight now."""
    from pipeline.ops import apply, evaluate, plan_node_resumes
    from pipeline.ops.runners import collect_inputs, local_node_name, read_nodes, run_command

    ops = _load(config)
    name = node or local_node_name()
    nodes = read_nodes(node=name)
    health = {}
    if any(n.drained for n in nodes):
        health[name] = evaluate(name, collect_inputs(ops.preflight), ops.preflight)
    _finish(apply(plan_node_resumes(nodes, health, ops.sweep), run_command, dry_run=dry_run))


@sweep_app.command("reservations")
def sweep_reservations(config: ConfigOption = DEFAULT_CONFIG, dry_run: DryRunOption = False) -> None:
    """Release the controller's reservations that have ended or whose nodes are all gone."""
    from pipeline.ops import apply, plan_reservation_releases
    from pipeline.ops.runners import read_nodes, read_reservations, run_command

    ops = _load(config)
    reservations = read_reservations()
    existing = [n.name for n in read_nodes()]
    # scontrol prints the controller's local time without a zone; the sweep runs on the controller.
    decisions = plan_reservation_releases(reservations, existing, ops.sweep, datetime.now())
    _finish(apply(decisions, run_command, dry_run=dry_run))


def _load(config: Path) -> Any:
    """The ops config at ``config``; a missing file is a :class:`ConfigError` that says where one comes from."""
    from pipeline.errors import ConfigError
    from pipeline.ops import load_ops_config

    if not config.exists():
        raise ConfigError(
            str(config),
            [
                (
                    "",
                    f"no ops config here. On a cluster the Ansible preflight role renders {DEFAULT_CONFIG}; "
                    f"on one machine copy the commented example {EXAMPLE_CONFIG} there, or pass it with "
                    "--config",
                )
            ],
        )
    return load_ops_config(config)


def _finish(outcomes: list[Outcome]) -> None:
    from pipeline.ops import OutcomeStatus

    _print_lines([o.line() for o in outcomes] or ["nothing to do"])
    if any(o.status is OutcomeStatus.FAILED for o in outcomes):
        raise typer.Exit(1)


def _print_lines(lines: list[str]) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(soft_wrap=True, highlight=False)
    styles = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold red", "DONE": "green", "FAILED": "bold red"}
    for line in lines:
        word, _, rest = line.partition(" ")
        console.print(Text.assemble((word, styles.get(word, "yellow")), " ", rest))
