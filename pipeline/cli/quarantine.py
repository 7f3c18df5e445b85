"""``sluice quarantine list``: every quarantined file, its reasons and the checks that failed."""

from __future__ import annotations

import typer
from rich.markup import escape

from pipeline.cli._common import console, context, print_json

app = typer.Typer(no_args_is_help=True, help="Quarantined files and why.")


@app.command("list")
def list_(
    vendor: str = typer.Option(None, help="Only this vendor."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON records."),
) -> None:
    """Explain each quarantined file: reason codes, detail, failed checks. Raw bytes stay untouched."""
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.queries import failed_checks, list_files

    with session_scope(make_session_factory(context().engine)) as session:
        rows = list_files(session, state="quarantined", vendor=vendor)
        checks = failed_checks(session, [r["episode_id"] for r in rows])
    for row in rows:
        row["failed_checks"] = checks.get(row["episode_id"], [])
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("nothing quarantined")
    for row in rows:
        # what the files and checks say is text, not markup: "[failed]" or a path with brackets would go
        console.print(
            f"[bold red]{escape(row['vendor'])}/{escape(row['path'])}[/]  {', '.join(row['reasons'])}"
        )
        console.print(f"  sha256 {row['sha256']}  ({row['size_bytes']} bytes, kept in the raw store)")
        for check in row["failed_checks"]:
            console.print(
                escape(f"  - {check['check']} [{check['status']}]: {check['detail'] or ''}"), highlight=False
            )
        if not row["failed_checks"] and row.get("detail"):  # refused by a step (the transcode), not a gate
            console.print(escape(f"  - {row['detail']}"), highlight=False)
