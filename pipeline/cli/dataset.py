"""``sluice dataset sync | build | list | show | diff``: the warehouse and versioned datasets.

:data:`warehouse_app` holds the same ``sync`` command for a ``sluice warehouse`` group.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from pipeline.cli._common import console, error_console, print_table, warn
from pipeline.enums import Split

app = typer.Typer(no_args_is_help=True, help="Build and inspect versioned datasets from the warehouse.")
warehouse_app = typer.Typer(
    no_args_is_help=True, help="The DuckDB warehouse: a columnar copy of the catalog."
)


SPLITS = tuple(s.value for s in Split)


def split_summary(version: Any) -> str:
    """One line saying what the counts count: episodes per split, then manifest rows (per split when the
    version recorded them); a video episode is one row per clip, so the two differ."""
    episodes = ", ".join(f"{s} {version.split_episodes.get(s, 0)}" for s in SPLITS)
    rows = f"{version.row_count} manifest rows"
    if version.split_rows is not None:
        rows += " (" + ", ".join(f"{s} {version.split_rows.get(s, 0)}" for s in SPLITS) + ")"
    return f"episodes per split: {episodes}; {rows}"


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
    print_table(
        f"warehouse sync → {report.warehouse_path}",
        [
            {
                "table": e.table,
                "mode": e.mode,
                "moved": e.rows_moved,
                "deleted": e.rows_deleted,
                "rows": e.rows_total,
            }
            for e in report.tables
        ],
        ["table", "mode", "moved", "deleted", "rows"],
        justify_right=["moved", "deleted", "rows"],
    )
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
    exclude_recalled: bool = typer.Option(
        False, "--exclude-recalled", help="Leave out every episode a `sluice recall` rejected (recorded why)."
    ),
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
        exclude = _recalled(engine) if exclude_recalled else None
        version = build_version(
            spec,
            engine=engine,
            warehouse_path=settings.warehouse_path,
            store=Store(settings.store, verify=settings.store_verify),
            limits=settings.warehouse_limits,
            exclude=exclude,
        )
    finally:
        engine.dispose()
    if as_json:
        _print_json(version.as_dict())
        return
    verb = "built" if version.created else "unchanged, kept"
    console.print(f"{verb} [bold]{version.ref}[/]: {split_summary(version)}")
    for warning in version.warnings:
        warn(warning)
    console.print(f"manifest {version.manifest_uri}\nsha256   {version.manifest_sha256}", highlight=False)
    dropped = {k: n for k, n in version.counts.items() if k not in ("matched", "rows") and n}
    if dropped:
        console.print(f"left out: {dropped} of {version.counts.get('matched', 0)} matched", highlight=False)


def _recalled(engine: Any) -> dict[int, list[str]]:
    from pipeline.annotate.recall import recalled_episodes
    from pipeline.catalog import make_session_factory, session_scope

    with session_scope(make_session_factory(engine)) as session:
        return recalled_episodes(session)


@app.command("list")
def list_command(
    name: str = typer.Argument(None, help="Only this dataset."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List dataset versions recorded in the catalog."""
    from pipeline.catalog.engine import make_session_factory, session_scope
    from pipeline.datasets import list_versions
    from pipeline.datasets.versions import require_dataset

    _, engine = _catalog()
    try:
        with session_scope(make_session_factory(engine)) as session:
            if name is not None:
                require_dataset(session, name)
            versions = list_versions(session, name)
    finally:
        engine.dispose()
    if as_json:
        _print_json([v.as_dict() for v in versions])
        return
    rows = []
    for v in versions:
        row: dict[str, Any] = {
            "version": v.ref,
            "created": v.created_at.strftime("%Y-%m-%d %H:%M") if v.created_at else "",
            "manifest rows": v.row_count,
            "manifest sha256": (v.manifest_sha256 or "")[:16],
        }
        for split in SPLITS:
            row[f"{split} episodes"] = v.split_episodes.get(split, 0)
        rows.append(row)
    episodes = [f"{split} episodes" for split in SPLITS]
    print_table(
        "dataset versions (a video episode is one manifest row per clip)",
        rows,
        ["version", "created", *episodes, "manifest rows", "manifest sha256"],
        justify_right=[*episodes, "manifest rows"],
    )
    if not versions:  # said on stderr: piped, stdout stays the header alone
        error_console.print("no dataset version recorded yet")
    for v in versions:
        for warning in v.warnings:
            warn(f"{v.ref}: {warning}")


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
    console.print(split_summary(found))
    for warning in found.warnings:
        warn(warning)
    for key in (
        "spec_hash",
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
    print_table(
        f"episodes of {result.a} and {result.b}, by split",
        [
            {
                f"split in {result.a}": row["split_a"] or "—",
                f"split in {result.b}": row["split_b"] or "—",
                "episodes": row["episodes"],
                "e.g.": ", ".join(str(e) for e in row["examples"][:5]),
            }
            for row in result.as_dict()["transitions"]
        ],
        [f"split in {result.a}", f"split in {result.b}", "episodes", "e.g."],
        justify_right=["episodes"],
    )
    console.print(
        f"only in {result.a}: {result.only_in_a}; only in {result.b}: {result.only_in_b}; "
        f"moved: {result.moved}; unchanged: {result.unchanged}",
        highlight=False,
    )
