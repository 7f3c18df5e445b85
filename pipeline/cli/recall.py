"""``sluice recall --check NAME [--version V]``: apply a new or changed check to everything already delivered.

For every vendor whose config configures the annotator ``NAME`` (or only ``--vendor FILE``): score the
accepted episodes it has not scored at that version, then name every dataset version, manifest and shard
holding an episode its bounds now reject (:mod:`pipeline.annotate.recall`). ``sluice dataset build
--exclude-recalled`` cuts versions without them.
"""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli._common import console, context, error_console, print_json, print_table


def command(
    check: str = typer.Option(..., "--check", help="The annotator to recall by (its registry name)."),
    version: str = typer.Option(None, "--version", help="Its version (default: the vendor config's)."),
    vendor_file: list[Path] = typer.Option(
        [],
        "--vendor",
        help="Only this vendor file (repeatable; default: every vendor configuring the check).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the reports as JSON."),
) -> None:
    """Score the episodes a check has not scored, then list the dataset versions, manifests and shards that
    hold an episode it rejects."""
    from pipeline.annotate.recall import RecallError, run_recall
    from pipeline.config import load_vendor, load_vendors
    from pipeline.errors import ConfigError
    from pipeline.settings import load_settings

    settings = load_settings()
    if vendor_file:
        vendors = [load_vendor(p) for p in vendor_file]
    else:
        loaded = load_vendors(settings.vendors_dir, base_dir=settings.project_dir_abs)
        vendors = [
            v for v in loaded.values() if not isinstance(v, ConfigError) and check in v.annotate.annotators
        ]
        if not vendors:
            raise RecallError(f"no vendor file in {settings.vendors_dir} configures the annotator {check!r}")
    ctx = context(settings)
    reports = []
    try:
        for vendor in vendors:
            with error_console.status(f"recall {check}: scoring {vendor.name}'s unscored episodes…"):
                reports.append(run_recall(vendor, ctx, check, version))
    finally:
        ctx.engine.dispose()
    if as_json:
        print_json([r.as_dict() for r in reports])
        return
    for r in reports:
        console.print(
            f"[bold]{r.vendor}[/]: {r.check} v{r.version} scored {r.scored} episode(s) "
            f"({r.already_scored} already scored, {r.unscored} could not be scored) of {r.accepted} accepted; "
            f"it rejects {len(r.rejected)}",
            highlight=False,
        )
        if r.datasets:
            print_table(
                "dataset versions holding rejected episodes",
                [{**d, "manifests": ", ".join(d["manifests"])} for d in r.datasets],
                ["dataset", "rejected_episodes", "episodes", "manifests"],
                justify_right=["rejected_episodes", "episodes"],
            )
        if r.shards:
            print_table(
                "shards holding rejected episodes",
                r.shards,
                ["uri", "dataset", "split", "rejected_episodes", "episodes"],
                justify_right=["rejected_episodes", "episodes"],
            )
        if r.rejected and not r.datasets and not r.shards:
            console.print("no dataset version or shard holds them yet", highlight=False)
