"""``sluice airflow up | down | status | pools``: a local Airflow for the vendor DAGs, with login.

Everything lives under ``$SLUICE_HOME/airflow`` (see :mod:`pipeline.airflow_local`). ``up`` creates the
pools the vendor files declare, starts the API server, scheduler, DAG processor and triggerer, and prints
where to log in; ``down`` stops what ``up`` started.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from pipeline.airflow_local import LocalAirflow, PoolSpec
    from pipeline.settings import Settings

app = typer.Typer(no_args_is_help=True, help="Run a local Airflow with the vendor DAGs.")

Port = Annotated[int | None, typer.Option("--port", help="API server port (default 8080, or a free one).")]
MetadataUrl = Annotated[
    str | None,
    typer.Option(
        "--metadata-url", help="SQLAlchemy URL of a Postgres for Airflow's metadata (default: SQLite)."
    ),
]


def _local(port: int | None = None, metadata_url: str | None = None) -> tuple[LocalAirflow, Settings]:
    from pipeline.airflow_local import LocalAirflow
    from pipeline.settings import load_settings

    settings = load_settings()
    return LocalAirflow.from_settings(settings, port=port, metadata_url=metadata_url), settings


def _vendor_pools(settings: Settings) -> dict[str, PoolSpec]:
    from rich.console import Console

    from pipeline.airflow_local import pools_from_vendors
    from pipeline.config import VendorConfig, load_vendors
    from pipeline.orchestrate.vendors import vendors_folder

    folder = vendors_folder(settings)
    loaded = load_vendors(folder, base_dir=settings.project_dir_abs)
    for name, result in loaded.items():
        if not isinstance(result, VendorConfig):
            Console(stderr=True).print(
                f"[yellow]skipping invalid vendor file {name}:[/] {result}", highlight=False
            )
    return pools_from_vendors(v for v in loaded.values() if isinstance(v, VendorConfig))


@app.command()
def up(port: Port = None, metadata_url: MetadataUrl = None) -> None:
    """Start the API server, scheduler, DAG processor and triggerer; print where to log in.

    The local Postgres is started (and the catalog migrated) when it is not up; Airflow's metadata DB is a
    database of its own beside the catalog unless ``--metadata-url`` names another.
    """
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from pipeline.orchestrate.platform import local_platform
    from pipeline.settings import load_settings

    overrides = {"airflow_database_url": metadata_url} if metadata_url else {}
    settings = load_settings(**overrides)
    console = Console()
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console
    ) as bar:
        bar.add_task("starting Postgres if needed, migrating, starting Airflow", total=None)
        with local_platform(settings, keep_running=True, port=port) as platform:
            airflow = platform.airflow
            status = airflow.status()
    pools = _vendor_pools(settings)
    console.print(f"Airflow is up at [bold]{status.url}[/] (home {airflow.home})")
    console.print(f"log in as [bold]{status.user}[/] with password [bold]{airflow.admin_password()}[/]")
    console.print(f"(the password is kept in {status.password_file}; service logs in {airflow.log_dir})")
    console.print(f"pools: {', '.join(f'{n}={p.slots}' for n, p in pools.items())}")


@app.command()
def down() -> None:
    """Stop the services `up` started (the local Postgres stays up: `sluice db down` stops it)."""
    from rich.console import Console

    airflow, _ = _local()
    stopped = airflow.down()
    Console().print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@app.command()
def status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Say which services run and whether Airflow reports them healthy; exit 1 if any is down."""
    from rich.console import Console

    airflow, _ = _local()
    if not airflow.state_path.exists():
        Console().print("the local Airflow was never started (run `sluice airflow up`)")
        raise typer.Exit(1)
    report = airflow.status()
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        console = Console()
        console.print(f"url: {report.url}  user: {report.user}  password file: {report.password_file}")
        for service in report.services:
            state = "[green]running[/]" if service.running else "[red]stopped[/]"
            health = report.health.get(service.component.replace("-", "_"), {}).get("status", "")
            console.print(f"  {service.component:14} {state} pid {service.pid or '-'} {health}")
    if not report.running:
        raise typer.Exit(1)


@app.command()
def pools(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only print the pools.")] = False,
) -> None:
    """Create or update the Airflow pools the vendor files declare (the largest size wins)."""
    from pipeline.cli._common import console, print_table

    airflow, settings = _local()
    wanted = _vendor_pools(settings)
    print_table(
        "Airflow pools from the vendor files",
        [{"pool": n, "slots": spec.slots, "description": spec.description} for n, spec in wanted.items()],
        ["pool", "slots", "description"],
        justify_right=["slots"],
    )
    if not dry_run:
        airflow.set_pools(wanted)
        console.print(f"{len(wanted)} pool(s) set in {airflow.metadata_url.split('://')[0]} metadata DB")
