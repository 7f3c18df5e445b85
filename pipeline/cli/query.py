"""``sluice query "SELECT ..."``: read-only scenario search over the warehouse, as a table or JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from pipeline.warehouse.connection import MAX_LIMIT_BYTES, MAX_TIMEOUT_S


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
    timeout_s: float = typer.Option(
        None,
        "--timeout-s",
        min=0.001,
        max=MAX_TIMEOUT_S,
        help="Stop the query after this long (default: SLUICE_WAREHOUSE_TIMEOUT_S, 300).",
    ),
    memory_limit_bytes: int = typer.Option(
        None,
        "--memory-limit-bytes",
        min=64 << 20,
        max=MAX_LIMIT_BYTES,
        help="Memory the query may use before spilling (default: SLUICE_WAREHOUSE_MEMORY_LIMIT_BYTES, 2 GiB).",
    ),
) -> None:
    """Run read-only SQL over the warehouse: the sandbox refuses writes, files and extensions."""
    from pipeline.settings import load_settings
    from pipeline.warehouse.query import run_query

    settings = load_settings()
    path = warehouse or settings.warehouse_path
    limits = settings.warehouse_limits
    if timeout_s is not None:
        limits = limits.model_copy(update={"timeout_s": timeout_s})
    if memory_limit_bytes is not None:
        limits = limits.model_copy(update={"memory_limit_bytes": memory_limit_bytes})
    bound = dict(_param(p) for p in params)
    result = run_query(path, sql, bound, max_rows=max_rows, limits=limits)
    rows = result.table.to_pylist()
    if as_json:
        typer.echo(json.dumps(rows, default=str, ensure_ascii=False))
        return
    from pipeline.cli._common import console, print_table

    print_table(None, rows, list(result.table.column_names))
    more = " (more rows matched: raise --max-rows)" if result.truncated else ""
    console.print(f"{len(rows)} row(s) in {result.duration_s:.3f} s{more}", highlight=False)
