"""``sluice db up | down | status | url | migrate | downgrade``: the system-of-record database."""

from __future__ import annotations

import json

import typer
from rich.console import Console

from pipeline.settings import load_settings

app = typer.Typer(no_args_is_help=True, help="Start, stop and migrate the catalog database.")
console = Console()


def _external_url() -> str | None:
    return load_settings().database_url


@app.command()
def up() -> None:
    """Start the local cluster under SLUICE_HOME (nothing is started when SLUICE_DATABASE_URL is set)."""
    from pipeline.pgserver import local_cluster

    if _external_url():
        console.print("SLUICE_DATABASE_URL is set: using that server, nothing started.")
        return
    cluster = local_cluster(load_settings())
    cluster.up()
    status = cluster.status()
    console.print(f"postgres running on 127.0.0.1:{status.port} (data in {status.data_dir})")


@app.command()
def down(destroy: bool = typer.Option(False, help="Also delete the cluster's files.")) -> None:
    """Stop the local cluster."""
    from pipeline.pgserver import local_cluster

    cluster = local_cluster(load_settings())
    was = "stopped" if cluster.status().running else "was not running"
    if destroy:
        existed = cluster.root.exists()
        cluster.destroy()
        console.print(
            f"postgres {was}; " + ("its files deleted" if existed else f"no cluster in {cluster.root}")
        )
    else:
        cluster.down()
        console.print(f"postgres {was}")


@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Say whether the local cluster runs, and where; with SLUICE_DATABASE_URL set, whether that server
    answers and the catalog's revision there. Exit 1 when the catalog's server is not there."""
    from pipeline.pgserver import local_cluster

    info = local_cluster(load_settings()).status().as_dict()
    info.pop("url", None)  # carries the password; `sluice db url` prints it on purpose
    external = _external_url()
    info["external_url_set"] = bool(external)
    if external:
        info.update(_reach(external))
    if as_json:
        print(json.dumps(info))
    else:
        for key, value in info.items():
            console.print(f"{key}: {value}", highlight=False)
    if not info["running"] and not info.get("external_reachable"):
        raise typer.Exit(1)


def _reach(url: str) -> dict[str, object]:
    """Whether the server at ``url`` answers, and the catalog revision it holds (None: never migrated)."""
    from pipeline.catalog.migrate import current
    from pipeline.errors import DatabaseError

    try:
        return {"external_reachable": True, "external_revision": current(url)}
    except DatabaseError as exc:
        return {"external_reachable": False, "external_error": str(exc)}


@app.command()
def url() -> None:
    """Print the catalog's SQLAlchemy URL (with its password)."""
    from pipeline.pgserver import database_url

    print(database_url(load_settings()))


@app.command()
def migrate(revision: str = typer.Argument("head", help="Target revision.")) -> None:
    """Upgrade the catalog schema, then create the writer and curation roles and grant them."""
    from pipeline.catalog.migrate import behind, current
    from pipeline.cli._common import warn
    from pipeline.pgserver import database_url, migrate_catalog

    settings = load_settings()
    roles = migrate_catalog(settings, revision)
    at = current(database_url(settings))
    console.print(f"catalog at {_revision(at)}; roles: {', '.join(roles) or 'grants refreshed'}")
    if behind(revision, at):  # Alembic's upgrade to a revision behind the catalog's does nothing, silently
        warn(
            f"the catalog is past {revision}: migrate only goes forward; `sluice db downgrade {revision}` goes back"
        )


def _revision(at: str | None) -> str:
    from pipeline.catalog.migrate import head

    if at is None:
        return "no revision (empty)"
    return f"revision {at}" + (" (head)" if at == head() else "")


# A relative revision ("-1") is an argument, not an unknown option.
@app.command(context_settings={"ignore_unknown_options": True})
def downgrade(revision: str = typer.Argument(..., help="Target revision, e.g. base or -1.")) -> None:
    """Downgrade the catalog schema."""
    from pipeline.catalog.migrate import current
    from pipeline.catalog.migrate import downgrade as do_downgrade
    from pipeline.pgserver import database_url

    url = database_url(load_settings())
    do_downgrade(url, revision)
    console.print(f"catalog at {_revision(current(url))}")
