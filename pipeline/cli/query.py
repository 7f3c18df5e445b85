"""``sluice query "SELECT ..."``: read-only scenario search over the warehouse, as a table or JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def _param(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise typer.BadParameter(f"{text!r}: write --param name=value")
    try:
        value = json.loads(raw)  # numbers, true/false, lists; anything else is text
    except json.JSONDecodeError:
        value = raw
    return name, value


def command(
    sql: str = typer.Argument(
        ..., help="One SELECT over the warehouse views (episode_view, ...) or catalog.*"
    ),
    params: list[str] = typer.Option(
        [], "--param", "-p", help="A bound $name value: name=value (repeatable)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as a JSON array of objects."),
    max_rows: int = typer.Option(1000, "--max-rows", min=1, help="Stop after this many rows."),
    warehouse: Path = typer.Option(None, "--warehouse", help="Warehouse file (default: SLUICE_HOME's)."),
) -> None:
    """Run read-only SQL over the warehouse: the sandbox refuses writes, files and extensions."""
    from pipeline.settings import load_settings
    from pipeline.warehouse.query import run_query

    path = warehouse or load_settings().warehouse_path
    bound = dict(_param(p) for p in params)
    result = run_query(path, sql, bound, max_rows=max_rows)
    rows = result.table.to_pylist()
    if as_json:
        typer.echo(json.dumps(rows, default=str, ensure_ascii=False))
        return
    from pipeline.cli._common import console, print_table

    print_table(None, rows, list(result.table.column_names))
    more = " (more rows matched: raise --max-rows)" if result.truncated else ""
    console.print(f"{len(rows)} row(s) in {result.duration_s:.3f} s{more}", highlight=False)
