"""``sluice docs generate``: regenerate the references in docs/reference/ from the code."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli._common import console

app = typer.Typer(no_args_is_help=True, help="Generated documentation.")


@app.command()
def generate(root: Path = typer.Option(Path("."), help="Repository root.")) -> None:
    """Write docs/reference/vendor-config.md and reason-codes.md from the models and enums."""
    from pipeline.docsgen import write

    for path in write(root):
        console.print(f"wrote {path}")
