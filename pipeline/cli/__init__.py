"""The ``sluice`` command line.

Each command group lives in its own module under ``pipeline/cli/`` and exposes either a ``typer.Typer``
named ``app`` (a group: ``sluice db up``) or a function named ``command`` (a single command: ``sluice bench
NAME``); :data:`COMMAND_GROUPS` mounts them. Group modules import heavy libraries inside their commands so
that ``sluice --help`` stays fast.
"""

from __future__ import annotations

import importlib
import logging

import typer

from pipeline.errors import SluiceError

COMMAND_GROUPS: dict[str, str] = {
    "db": "pipeline.cli.db",
    "vendor": "pipeline.cli.vendor",
    "synth": "pipeline.cli.synth",
    "bench": "pipeline.cli.bench",
    "ingest": "pipeline.cli.ingest",
    "files": "pipeline.cli.files",
    "quarantine": "pipeline.cli.quarantine",
    "scrub": "pipeline.cli.scrub",
    "demo": "pipeline.cli.demo",
    "docs": "pipeline.cli.docs",
    "shard": "pipeline.cli.shard",
    "export": "pipeline.cli.export",
    "ops": "pipeline.cli.ops",
    "status": "pipeline.cli.status",
    "lineage": "pipeline.cli.lineage",
    "report": "pipeline.cli.report",
    "dataset": "pipeline.cli.dataset",
    "query": "pipeline.cli.query",
    "warehouse": "pipeline.cli.warehouse",
    "airflow": "pipeline.cli.airflow",
    "plan": "pipeline.cli.plan",
    "run": "pipeline.cli.run",
}

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Sluice: robot-learning data platform.")


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at DEBUG level.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


for _name, _module_name in COMMAND_GROUPS.items():
    _module = importlib.import_module(_module_name)
    if hasattr(_module, "app"):
        app.add_typer(_module.app, name=_name)
    else:
        app.command(_name)(_module.command)


def main() -> None:
    """Console-script entry point: product errors print as one clean message and exit 2."""
    from rich.console import Console

    try:
        app()
    except SluiceError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", markup=True, highlight=False)
        raise SystemExit(2) from None
