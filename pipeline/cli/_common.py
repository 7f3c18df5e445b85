"""Helpers the CLI commands share: settings, clients, output.

Output follows where it goes. On a terminal, tables are rich tables and long lines wrap at its width. When
stdout is a pipe or a file, nothing is wrapped (a sha256 stays on one line) and tables are plain columns
separated by two spaces, one row per line, with the header first and the title on stderr, so that
``grep``, ``cut`` and ``awk`` work on them; ``--json`` prints records for programs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pipeline.settings import Settings, load_settings
from pipeline.steps.base import StepContext

#: What separates the columns of a plain (piped) table.
PLAIN_COLUMN_GAP = "  "
#: File endings that make a positional argument a vendor config file rather than a folder.
VENDOR_FILE_SUFFIXES = (".yaml", ".yml")


def make_console(*, stderr: bool = False) -> Console:
    """A console that wraps at the terminal's width, and not at all when its stream is not a terminal."""
    made = Console(stderr=stderr, highlight=False)
    made.soft_wrap = not made.is_terminal
    return made


console = make_console()
#: Progress, warnings and diagnostics: on stderr, so that ``--json`` output on stdout is JSON and nothing else.
error_console = make_console(stderr=True)


def context(settings: Settings | None = None) -> StepContext:
    """Clients for one CLI command, built from the environment once, on a catalog migrated to head
    (:class:`~pipeline.catalog.migrate.CatalogNotMigratedError` names the command that migrates it)."""
    from pipeline.catalog.migrate import require_current
    from pipeline.steps.runner import build_context

    ctx = build_context(settings or load_settings())
    require_current(ctx.engine)
    return ctx


def warn(message: str) -> None:
    """A warning on stderr: the command goes on, but the user must see it even when stdout is piped."""
    error_console.print(Text.assemble(("warning: ", "bold yellow"), message))


def vendor_file_argument(path: Path) -> bool:
    """Whether a positional PATH names a vendor config file (commands accept one where --vendor does)."""
    return path.suffix in VENDOR_FILE_SUFFIXES and not path.is_dir()


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


def print_table(
    title: str | None,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    *,
    justify_right: Sequence[str] = (),
    out: Console | None = None,
) -> None:
    """``rows`` as a table of ``columns``: a rich table on a terminal, plain columns otherwise."""
    out = out or console
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    if not out.is_terminal:
        if title:
            error_console.print(title)
        for line in plain_columns(list(columns), cells, justify_right=justify_right):
            out.print(line, markup=False, highlight=False, soft_wrap=True)
        return
    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold", justify="right" if column in justify_right else "left")
    for row_cells in cells:
        # Text, not markup: paths, details and names come from vendors ("odd[bold]name" is a file name)
        table.add_row(*(Text(cell) for cell in row_cells))
    out.print(table)


def plain_columns(
    header: list[str], cells: list[list[str]], *, justify_right: Sequence[str] = ()
) -> list[str]:
    """Lines of a plain table: each column as wide as its widest cell, newlines in a cell made ``; ``."""
    flat = [[c.replace("\n", "; ") for c in row] for row in [header, *cells]]
    widths = [max(len(row[i]) for row in flat) for i in range(len(header))]
    lines = []
    for row in flat:
        parts = [
            cell.rjust(width) if name in justify_right else cell.ljust(width)
            for cell, width, name in zip(row, widths, header, strict=True)
        ]
        lines.append(PLAIN_COLUMN_GAP.join(parts).rstrip())
    return lines


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)
