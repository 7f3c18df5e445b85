"""``sluice files list``: one record per source file with its state."""

from __future__ import annotations

from typing import Any

import typer

from pipeline.cli._common import context, error_console, print_json, print_table
from pipeline.enums import FileState

app = typer.Typer(no_args_is_help=True, help="Source files and the state each ended in.")


def original_label(row: dict[str, Any]) -> str | None:
    """A duplicate's original as a person finds it: its path, with its vendor when that is another one (the
    same bytes delivered by two vendors, or ingested ad hoc before), and its episode id."""
    if row.get("duplicate_of") is None:
        return None
    where = row["duplicate_of"]
    if row.get("duplicate_of_vendor") not in (None, row.get("vendor")):
        where = f"{row['duplicate_of_vendor']}/{where}"
    return f"{where} (episode {row['duplicate_of_episode']})"


@app.command("list")
def list_(
    state: FileState = typer.Option(None, help="Only files in this state."),
    vendor: str = typer.Option(None, help="Only this vendor."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON records."),
) -> None:
    """List source files: path, sha256, state, reasons, duplicate_of."""
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.queries import list_files

    with session_scope(make_session_factory(context().engine)) as session:
        rows = list_files(session, state=state, vendor=vendor)
    if as_json:
        print_json(rows)
        return
    print_table(
        "source files",
        [r | {"duplicate_of": original_label(r)} for r in rows],
        ["vendor", "path", "state", "reasons", "duplicate_of", "sha256"],
    )
    if not rows:  # said on stderr: piped, stdout stays the header alone
        filtered = state is not None or vendor is not None
        error_console.print("no source file matches" if filtered else "no source file recorded yet")
