"""``sluice export``: dataset versions in other tools' formats."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli._common import console, context, error_console, print_json, warn

app = typer.Typer(no_args_is_help=True, help="Export dataset versions (LeRobot v3).")


@app.command("lerobot")
def lerobot(
    dataset_version: str = typer.Argument(..., help="Dataset version as NAME@VERSION."),
    out: Path = typer.Argument(..., help="New folder to write the LeRobot v3.0 dataset to."),
    robot_type: str = typer.Option("", "--robot-type", help="robot_type written into meta/info.json."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Write NAME@VERSION as a LeRobot v3.0 dataset, and report what was checked."""
    from pipeline.errors import UnknownChoiceError
    from pipeline.export import export_dataset_version

    name, sep, version = dataset_version.partition("@")
    if not sep or not name or not version:
        raise UnknownChoiceError("dataset version (NAME@VERSION)", dataset_version, ["NAME@VERSION"])
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    ctx = context()
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    # on a terminal only: elsewhere a transient bar leaves a blank line in the log
    with Progress(
        *columns, console=error_console, transient=True, disable=not error_console.is_terminal
    ) as shown:
        task = shown.add_task(f"exporting {dataset_version}: robot episodes", total=None)

        def progress(done: int, total: int) -> None:
            shown.update(task, completed=done, total=total)

        report = export_dataset_version(
            ctx.engine, name, version, out, robot_type=robot_type or None, progress=progress
        )
    if as_json:
        print_json(report.as_dict())
    else:
        console.print(f"{report.episodes} episodes, {report.frames} frames → {report.out}")
        for check, ok in report.checks.items():
            console.print(f"  {'[green]ok[/]' if ok else '[red]FAILED[/]'} {check}")
        for skip in report.skipped:
            console.print(f"  skipped episode {skip['episode_id']}: {skip['why']}")
        for warning in report.warnings:
            warn(warning)
