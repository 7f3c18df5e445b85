"""``sluice docs generate``: regenerate the references in docs/reference/ from the code."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli._common import console

app = typer.Typer(no_args_is_help=True, help="Generated documentation.")


@app.command()
def generate(
    root: Path | None = typer.Option(None, help="The project's checkout (default: the current directory)."),
) -> None:
    """Write docs/reference/vendor-config.md and reason-codes.md from the models and enums into the project's
    checkout: the current directory, or --root."""
    from pipeline.docsgen import project_problem, write

    where = root if root is not None else Path(".")
    problem = project_problem(where)
    if problem is not None:
        if root is not None:
            raise typer.BadParameter(f"--root {root}: {problem}")
        raise typer.BadParameter(
            f"the current directory {Path.cwd()}: {problem}; run it in the project's checkout or pass --root"
        )
    for path in write(where):
        console.print(f"wrote {path}")
