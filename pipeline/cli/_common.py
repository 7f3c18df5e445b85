"""Helpers the CLI commands share: settings, clients, output."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from pipeline.settings import Settings, load_settings
from pipeline.steps.base import StepContext

console = Console()
#: Progress and diagnostics: on stderr, so that ``--json`` output on stdout is JSON and nothing else.
progress = Console(stderr=True)


def context(settings: Settings | None = None) -> StepContext:
    """Clients for one CLI command, built from the environment once."""
    from pipeline.steps.runner import build_context

    return build_context(settings or load_settings())


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def print_table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> None:
    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*[_cell(row.get(c)) for c in columns])
    console.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)
