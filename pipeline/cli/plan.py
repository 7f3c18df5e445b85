"""``sluice plan VENDOR``: how a run of the vendor would be batched now (nothing is recorded).

Discovers the vendor's ready files as a run would, plans them with the vendor's limits and caps, and prints
the batches (files, bytes, start offset) and the planner's figures. Recorded plans are in the catalog's
``batches`` table and the store's ``runs/<pipeline_run_id>/`` artifacts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def command(
    vendor: Annotated[
        str, typer.Argument(help="Vendor name (a file in the vendors folder) or a vendor file.")
    ],
    settle: Annotated[
        bool, typer.Option("--settle/--no-settle", help="Wait settle_s to see which files are finished.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Show how the vendor's current drop would be split into batches."""
    import fsspec
    from rich.console import Console
    from rich.table import Table

    from pipeline.config import load_vendor
    from pipeline.discover import discover
    from pipeline.orchestrate import PlannedFile, make_plan
    from pipeline.orchestrate.vendors import vendors_folder
    from pipeline.settings import load_settings

    settings = load_settings()
    folder = vendors_folder(settings)
    path = Path(vendor) if vendor.endswith((".yaml", ".yml")) else folder / f"{vendor}.yaml"
    config = load_vendor(path, base_dir=settings.project_dir_abs)
    url = config.source_url(settings.project_dir_abs)
    fs, root = fsspec.core.url_to_fs(url, **dict(config.source.storage_options))
    found = discover(
        fs,
        root,
        include=config.source.include,
        exclude=config.source.exclude,
        ready_marker=config.source.ready_marker,
        settle_s=config.source.settle_s if settle else 0.0,
    )
    planned = make_plan(config, [PlannedFile(c.path, c.size_bytes) for c in found.candidates])
    if as_json:
        batches = [
            {"index": b.index, "files": [f.path for f in b.files], "planned_bytes": b.planned_bytes,
             "start_offset_s": b.start_offset_s}
            for b in planned.batches
        ]  # fmt: skip
        typer.echo(
            json.dumps(
                {"vendor": config.name, "source": url, "batches": batches, **planned.figures}, indent=2
            )
        )
        return
    console = Console()
    console.print(
        f"{config.name}: {len(found.candidates)} ready file(s) under {url}, {len(found.passed_over)} passed over"
    )
    table = Table(title=f"plan: {len(planned.batches)} batch(es)")
    for column in ("batch", "files", "bytes", "start offset s"):
        table.add_column(column, justify="right")
    for batch in planned.batches:
        table.add_row(
            str(batch.index), str(len(batch.files)), f"{batch.planned_bytes:,}", f"{batch.start_offset_s:g}"
        )
    console.print(table)
    for key in (
        "objective",
        "imbalance",
        "method",
        "violations",
        "solve_s",
        "workers_per_batch",
        "concurrent_batches",
    ):
        if key in planned.figures:
            console.print(f"  {key}: {planned.figures[key]}")
    for reason in planned.figures.get("sizing_reasons", []):
        console.print(f"  - {reason}")
