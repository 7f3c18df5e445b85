"""``sluice scrub``: re-hash every raw object and report any that changed or vanished."""

from __future__ import annotations

import typer

from pipeline.cli._common import console, context, print_json


def command(as_json: bool = typer.Option(False, "--json", help="Print findings as JSON.")) -> None:
    """Re-hash stored raw objects against the catalog; exit 1 if any changed."""
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.queries import all_blobs

    ctx = context()
    with session_scope(make_session_factory(ctx.engine)) as session:
        blobs = all_blobs(session)
    findings = []
    with console.status(f"re-hashing {len(blobs)} objects…"):
        findings = [f.__dict__ for f in ctx.store.scrub(blobs)]
    if as_json:
        print_json({"objects": len(blobs), "findings": findings})
    else:
        console.print(f"{len(blobs)} objects checked, {len(findings)} problem(s)")
        for f in findings:
            console.print(f"[red]{f['problem']}[/] {f['sha256']} {f['uri']}: {f['detail']}", highlight=False)
    if findings:
        raise typer.Exit(1)
