"""The ``sluice`` command line.

Each command group lives in its own module under ``pipeline/cli/`` and exposes either a ``typer.Typer``
named ``app`` (a group: ``sluice db up``) or a function named ``command`` (a single command: ``sluice bench
NAME``); :data:`COMMAND_GROUPS` mounts them. Group modules import heavy libraries inside their commands so
that ``sluice --help`` stays fast.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import typer
from typer.core import TyperGroup, TyperOption

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
    "services": "pipeline.cli.services",
    "recall": "pipeline.cli.recall",
}

# Markdown: the help texts are docstrings, whose ``code`` spans render as code instead of literal backticks.
app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    help="Sluice: robot-learning data platform.",
)


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


def cli_command() -> Any:
    """The command ``sluice`` runs (typer's click command; typer vendors click, hence ``Any``): the typer
    app, with flags shown without a value type (typer labels every on/off flag ``<bool>``, though a flag
    takes no value)."""
    command = typer.main.get_command(app)
    pending = [command]
    while pending:
        current = pending.pop()
        # The --help option is made on first use and cached: make it now, to relabel it too.
        help_option = current.get_help_option(current.context_class(current))
        for param in [*current.params, *([help_option] if help_option is not None else [])]:
            if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
                param.metavar = ""
        if isinstance(current, TyperGroup):
            pending += list(current.commands.values())
    return command


def main() -> None:
    """Console-script entry point: product errors, and faults whose cause is known (a catalog never
    migrated), print as one clean message and exit 2; anything else is a bug and keeps its traceback."""
    try:
        cli_command()(prog_name="sluice")
    except SluiceError as exc:
        _fail(str(exc))
    except Exception as exc:
        explained = explain(exc)
        if explained is None:
            raise
        _fail(explained)


#: Postgres's SQLSTATE for "relation does not exist".
UNDEFINED_TABLE = "42P01"


def explain(exc: BaseException) -> str | None:
    """What a user should read instead of the traceback of ``exc``, when its cause is known."""
    orig = getattr(exc, "orig", None)
    if getattr(orig, "pgcode", None) == UNDEFINED_TABLE:
        first = str(orig).strip().splitlines()[0]
        return f"the catalog lacks a table ({first}): it was never migrated; run `sluice db migrate`"
    return None


def _fail(message: str) -> None:
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True, soft_wrap=True).print(Text.assemble(("error: ", "bold red"), message))
    raise SystemExit(2) from None
