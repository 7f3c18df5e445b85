"""``sluice plan VENDOR`` (or ``--vendor FILE``): how a run of the vendor would be batched now (nothing is recorded).

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
        str | None, typer.Argument(help="Vendor name (a file in the vendors folder) or a vendor file.")
    ] = None,
    vendor_file: Annotated[
        Path | None, typer.Option("--vendor", help="A vendor file, as `sluice ingest --vendor` takes.")
    ] = None,
    settle: Annotated[
        bool, typer.Option("--settle/--no-settle", help="Wait settle_s to see which files are finished.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Show how the vendor's current drop would be split into batches."""
    from pipeline.cli._common import console, print_table, warn
    from pipeline.config import load_vendor
    from pipeline.orchestrate import PlannedFile, make_plan
    from pipeline.orchestrate.vendors import vendors_folder
    from pipeline.settings import load_settings
    from pipeline.vendor_ingest import discover_vendor

    if vendor is None and vendor_file is None:
        raise typer.BadParameter("give a vendor: its name, its file, or --vendor FILE")
    if vendor is not None and vendor_file is not None:
        raise typer.BadParameter("give a vendor (a name or a file) or --vendor FILE, not both")
    settings = load_settings()
    if vendor_file is not None:
        path = vendor_file
    elif vendor is not None and vendor.endswith((".yaml", ".yml")):
        path = Path(vendor)
    else:
        path = vendors_folder(settings) / f"{vendor}.yaml"
    config = load_vendor(path, base_dir=settings.project_dir_abs)
    url = config.source_url(settings.project_dir_abs)
    found = discover_vendor(config, settings.project_dir_abs, settle_s=None if settle else 0.0)
    empty = found.emptiness(url)
    if empty is not None:
        warn(f"{empty[1]}; a run now would end succeeded_with_warnings and process nothing")
    planned = make_plan(config, [PlannedFile(c.path, c.size_bytes) for c in found.candidates])
    if as_json:
        batches = [
            {"index": b.index, "files": [f.path for f in b.files], "planned_bytes": b.planned_bytes,
             "start_offset_s": b.start_offset_s}
            for b in planned.batches
        ]  # fmt: skip
        typer.echo(
            json.dumps(
                {
                    "vendor": config.name,
                    "source": url,
                    "batches": batches,
                    "warnings": [] if empty is None else [empty[1]],
                    "passed_over": [p.as_dict() for p in found.passed_over],
                    "unselected": found.unselected,
                    **planned.figures,
                },
                indent=2,
            )
        )
        return
    console.print(
        f"{config.name}: {len(found.candidates)} ready file(s) under {url}, {len(found.passed_over)} passed "
        f"over, {found.unselected} left out by the globs"
    )
    if found.passed_over:
        # what a run would leave for later (still uploading) or never take (a link out of the root, ...)
        print_table(
            "passed over",
            [p.as_dict() for p in found.passed_over],
            ["path", "why", "detail"],
        )
    print_table(
        f"plan: {len(planned.batches)} batch(es)",
        [
            {
                "batch": b.index,
                "files": len(b.files),
                "bytes": f"{b.planned_bytes:,}",
                "start offset s": f"{b.start_offset_s:g}",
            }
            for b in planned.batches
        ],
        ["batch", "files", "bytes", "start offset s"],
        justify_right=["batch", "files", "bytes", "start offset s"],
    )
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
