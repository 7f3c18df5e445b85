"""``sluice services up | status | down``: the cluster-mode services of SLUICE_HOME (S3 server, Redis, Ray);
``status`` also lists the local Postgres and the Airflow components."""

from __future__ import annotations

import json

import typer

from pipeline.cli._common import console
from pipeline.settings import load_settings

app = typer.Typer(
    no_args_is_help=True, help="Start, inspect and stop cluster mode's S3 server, Redis and Ray."
)

PARTS_HELP = "Which services (s3, redis, ray); all of them when omitted."
LISTED_HELP = "Which services (s3, redis, ray, postgres, airflow); all of them when omitted."


@app.command()
def up(names: list[str] = typer.Argument(None, help=PARTS_HELP)) -> None:
    """Start the services (those running are kept) and say where each serves."""
    from pipeline.services.registry import select

    for part in select(load_settings().home_abs, names):
        started = part.up()
        if started.was_running:
            said = f"already running at {started.where}"
        elif started.already_running:
            said = (
                f"started {', '.join(started.started)} ({', '.join(started.already_running)} already "
                f"running) at {started.where}"
            )
        else:
            said = f"started at {started.where}"
        console.print(f"{part.name}: {said}", highlight=False)
        for note in started.notes:
            console.print(f"{part.name}: {note}", highlight=False)


@app.command()
def status(
    names: list[str] = typer.Argument(None, help=LISTED_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Say which services run (Postgres and Airflow too), where, with their pids and logs."""
    from pipeline.services.registry import PARTLY_RUNNING, PARTS, RUNNING
    from pipeline.services.registry import status as gather

    info = gather(load_settings().home_abs, names)
    if as_json:
        print(json.dumps(info))
        return
    for name, part in info.items():
        processes = part["processes"]
        if part["state"] == RUNNING:
            said = f"running at {part['where']}"
        elif part["state"] == PARTLY_RUNNING:
            runs = [p for p, detail in processes.items() if detail["pid"] is not None]
            stopped = [p for p, detail in processes.items() if detail["pid"] is None]
            at = f" at {part['where']}" if part["where"] else ""
            said = f"partly running{at}: {', '.join(runs)} running, {', '.join(stopped)} stopped"
            if name in PARTS:
                said += f" (`sluice services up {name}` starts what is stopped)"
        else:
            said = "stopped"
        console.print(f"{name}: {said}", highlight=False)
        for process, detail in processes.items():
            console.print(f"    {process}: pid {detail['pid']}, log {detail['log']}", highlight=False)


@app.command()
def down(names: list[str] = typer.Argument(None, help=PARTS_HELP)) -> None:
    """Stop the services that run (found by their pid files, whoever started them)."""
    from pipeline.services.registry import select

    for part in select(load_settings().home_abs, names):
        console.print(f"{part.name}: {'stopped' if part.down() else 'was not running'}")
