"""``sluice dataset sync | build | list | show | diff``: the warehouse and versioned datasets.

:data:`warehouse_app` holds the same ``sync`` command for a ``sluice warehouse`` group.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(no_args_is_help=True, help="Build and inspect versioned datasets from the warehouse.")
warehouse_app = typer.Typer(
    no_args_is_help=True, help="The DuckDB warehouse: a columnar copy of the catalog."
)
console = Console()


def _catalog() -> tuple[Any, Any]:
    from pipeline.catalog.engine import make_engine
    from pipeline.pgserver import database_url
    from pipeline.settings import load_settings

    settings = load_settings()
    return settings, make_engine(database_url(settings), pool_size=1)


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, default=str, indent=2, sort_keys=True))


def _sync(full: bool, as_json: bool) -> None:
    from pipeline.warehouse import sync

    settings, engine = _catalog()
    try:
        report = sync(engine, settings.warehouse_path, full=full)
    finally:
        engine.dispose()
    if as_json:
        _print_json(report.as_dict())
        return
    table = Table(
        "table", "mode", "moved", "deleted", "rows", title=f"warehouse sync → {report.warehouse_path}"
    )
    for entry in report.tables:
        table.add_row(
            entry.table, entry.mode, str(entry.rows_moved), str(entry.rows_deleted), str(entry.rows_total)
        )
    console.print(table)
    console.print(f"{report.rows_moved} row(s) moved in {report.duration_s:.2f} s", highlight=False)


@app.command("sync")
def sync_command(
    full: bool = typer.Option(False, "--full", help="Reload every table instead of copying changes."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Copy new and changed catalog rows into the warehouse."""
    _sync(full, as_json)


@warehouse_app.command("sync")
def warehouse_sync_command(
    full: bool = typer.Option(False, "--full", help="Reload every table instead of copying changes."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Copy new and changed catalog rows into the warehouse."""
    _sync(full, as_json)


@app.command()
def build(
    spec_path: Path = typer.Argument(..., help="Dataset spec YAML (dags/datasets/*.yaml)."),
    no_sync: bool = typer.Option(
        False, "--no-sync", help="Build from the warehouse as it is, without syncing."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the version as JSON."),
) -> None:
    """Build a new immutable version of a dataset (or report that the latest one is identical)."""
    from pipeline.datasets import build as build_version
    from pipeline.datasets import load_spec
    from pipeline.store import Store
    from pipeline.warehouse import sync

    spec = load_spec(spec_path)
    settings, engine = _catalog()
    try:
        if not no_sync:
            sync(engine, settings.warehouse_path)
        version = build_version(
            spec,
            engine=engine,
            warehouse_path=settings.warehouse_path,
            store=Store(settings.store, verify=settings.store_verify),
            limits=settings.warehouse_limits,
        )
    finally:
        engine.dispose()
    if as_json:
        _print_json(version.as_dict())
        return
    verb = "built" if version.created else "unchanged, kept"
    console.print(f"{verb} [bold]{version.ref}[/]: {version.row_count} rows {version.split_counts}")
    console.print(f"manifest {version.manifest_uri}\nsha256   {version.manifest_sha256}", highlight=False)
    dropped = {k: n for k, n in version.counts.items() if k not in ("matched", "rows") and n}
    if dropped:
        console.print(f"left out: {dropped} of {version.counts.get('matched', 0)} matched", highlight=False)


@app.command("list")
def list_command(
    name: str = typer.Argument(None, help="Only this dataset."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List dataset versions recorded in the catalog."""
    from pipeline.catalog.engine import make_session_factory, session_scope
    from pipeline.datasets import list_versions

    _, engine = _catalog()
    try:
        with session_scope(make_session_factory(engine)) as session:
            versions = list_versions(session, name)
    finally:
        engine.dispose()
    if as_json:
        _print_json([v.as_dict() for v in versions])
        return
    table = Table("version", "created", "rows", "train", "val", "eval", "manifest sha256")
    for v in versions:
        s = v.split_counts
        created = v.created_at.strftime("%Y-%m-%d %H:%M") if v.created_at else ""
        sha = (v.manifest_sha256 or "")[:16]
        table.add_row(v.ref, created, str(v.row_count), str(s["train"]), str(s["val"]), str(s["eval"]), sha)
    console.print(table)


@app.command()
def show(
    ref: str = typer.Argument(..., help="name@version, e.g. pick_place@v3"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show one version: its spec, manifest files and split sizes."""
    from pipeline.catalog.engine import make_session_factory, session_scope
    from pipeline.datasets import get_version, parse_ref

    name, version = parse_ref(ref)
    _, engine = _catalog()
    try:
        with session_scope(make_session_factory(engine)) as session:
            found = get_version(session, name, version)
    finally:
        engine.dispose()
    if as_json:
        _print_json(found.as_dict())
        return
    console.print(f"[bold]{found.ref}[/] (id {found.id}, created {found.created_at})")
    for key in (
        "spec_hash",
        "row_count",
        "split_counts",
        "manifest_uri",
        "manifest_sha256",
        "parquet_uri",
        "near_duplicates",
    ):
        console.print(f"{key}: {getattr(found, key)}", highlight=False)
    console.print_json(json.dumps(found.spec))


@app.command()
def diff(
    a: str = typer.Argument(..., help="name@version"),
    b: str = typer.Argument(..., help="name@version, or a bare version of the same dataset"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Compare the episodes of two versions: added, removed, and moved between splits."""
    from pipeline.catalog.engine import make_session_factory, session_scope
    from pipeline.datasets import diff_versions, parse_ref

    ref_a = parse_ref(a)
    ref_b = parse_ref(b, default_name=ref_a[0])
    _, engine = _catalog()
    try:
        with session_scope(make_session_factory(engine)) as session:
            result = diff_versions(session, ref_a, ref_b)
    finally:
        engine.dispose()
    if as_json:
        _print_json(result.as_dict())
        return
    table = Table(f"split in {result.a}", f"split in {result.b}", "episodes", "e.g.")
    for row in result.as_dict()["transitions"]:
        examples = ", ".join(str(e) for e in row["examples"][:5])
        table.add_row(row["split_a"] or "—", row["split_b"] or "—", str(row["episodes"]), examples)
    console.print(table)
    console.print(
        f"only in {result.a}: {result.only_in_a}; only in {result.b}: {result.only_in_b}; "
        f"moved: {result.moved}; unchanged: {result.unchanged}",
        highlight=False,
    )
