"""``sluice demo``: the main job end to end on embedded defaults, then everything it started is stopped.

1. start the local Postgres under SLUICE_HOME (unless SLUICE_DATABASE_URL is set) and migrate the catalog;
2. validate the example vendors in ``dags/vendors``;
3. generate each vendor's synthetic drop where its config points (with a few named defects);
4. ingest and pre-gate both drops;
5. print what ended where: states per vendor and why each quarantined file was held back.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import typer

from pipeline.cli._common import console, print_table

#: Defects the demo drops carry, so the gate has something to show.
ROBOT_DEFECTS = ("truncated", "crc_flipped", "clock_jump", "duplicate", "dropped_frames")
VIDEO_DEFECTS = ("all_black", "rotated", "corrupt_bitstream", "zero_bytes")


def command(
    keep_running: bool = typer.Option(False, help="Leave the local Postgres running afterwards."),
    episodes: int = typer.Option(4, help="Clean robot episodes in the drop."),
    seconds: float = typer.Option(3.0, help="Length of each synthetic episode or clip."),
) -> None:
    """Run the main job end to end on embedded defaults (local Postgres, local store, generated drops)."""
    from pipeline.pgserver import local_cluster, migrate_catalog
    from pipeline.settings import load_settings

    settings = load_settings()
    started_here = False
    cluster = local_cluster(settings)
    t0 = time.monotonic()
    try:
        if not settings.database_url:
            started_here = not cluster.status().running
            with console.status("starting Postgres…"):
                cluster.up()
            console.print(f"[green]✓[/] Postgres on 127.0.0.1:{cluster.status().port} ({cluster.data_dir})")
        migrate_catalog(settings)
        console.print("[green]✓[/] catalog migrated, roles granted")
        vendors = _validate(settings)
        drops = _make_drops(vendors, settings, episodes=episodes, seconds=seconds)
        _ingest(vendors, settings)
        _summary(settings, drops)
        console.print(f"\n[bold green]demo finished in {time.monotonic() - t0:.0f} s[/]")
    finally:
        if started_here and not keep_running:
            cluster.down()
            console.print("Postgres stopped (use --keep-running to explore with `sluice files list`)")


def _validate(settings: Any) -> dict[str, Any]:
    from pipeline.config import config_hash, load_vendors

    loaded = load_vendors(settings.vendors_dir, base_dir=settings.project_dir_abs)
    vendors = {}
    for name, vendor in sorted(loaded.items()):
        if isinstance(vendor, Exception):
            raise vendor
        vendors[name] = vendor
        console.print(
            f"[green]✓[/] vendor {name} ({vendor.kind}) valid, config hash {config_hash(vendor)[:12]}"
        )
    return vendors


def _make_drops(vendors: dict[str, Any], settings: Any, *, episodes: int, seconds: float) -> dict[str, Path]:
    from pipeline.config.models import local_source_path
    from pipeline.synth import RobotDropConfig, VideoDropConfig, make_robot_drop, make_video_drop
    from pipeline.synth.defects import RobotDefect, VideoDefect

    drops = {}
    for name, vendor in vendors.items():
        root = local_source_path(vendor.source.url, settings.project_dir_abs)
        shutil.rmtree(root, ignore_errors=True)
        with console.status(f"generating {name}'s drop in {root}…"):
            if vendor.kind == "mcap":
                manifest = make_robot_drop(
                    root,
                    RobotDropConfig(
                        episodes=episodes,
                        seconds=seconds,
                        defects=tuple(RobotDefect(d) for d in ROBOT_DEFECTS),
                    ),
                    jobs=2,
                )
            else:
                manifest = make_video_drop(
                    root,
                    VideoDropConfig(
                        clips=episodes, seconds=seconds, defects=tuple(VideoDefect(d) for d in VIDEO_DEFECTS)
                    ),
                    jobs=2,
                )
        if vendor.source.ready_marker:
            (root / vendor.source.ready_marker).touch()
        total = sum(f.size_bytes for f in manifest.files)
        console.print(f"[green]✓[/] {name}: {len(manifest.files)} files, {total / 1e6:.1f} MB in {root}")
        drops[name] = root
    return drops


def _ingest(vendors: dict[str, Any], settings: Any) -> None:
    from pipeline.steps.runner import build_context
    from pipeline.vendor_ingest import ingest_vendor

    ctx = build_context(settings)
    for name, vendor in vendors.items():
        with console.status(f"ingesting and gating {name}…"):
            report = ingest_vendor(vendor, ctx, settle_s=0.0)
        steps = ", ".join(
            f"{step}: {s['succeeded']} ok / {s['rejected']} rejected / {s['skipped']} already done"
            for step, s in report.steps.items()
        )
        console.print(f"[green]✓[/] {name}: {report.discovered} files — {steps}")


def _summary(settings: Any, drops: dict[str, Path]) -> None:
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.queries import list_files
    from pipeline.steps.runner import build_context

    ctx = build_context(settings)
    with session_scope(make_session_factory(ctx.engine)) as session:
        rows = list_files(session)
    counts: dict[tuple[str, str], int] = {}
    for row in rows:
        counts[(row["vendor"], row["state"])] = counts.get((row["vendor"], row["state"]), 0) + 1
    print_table(
        "what every input ended as",
        [{"vendor": v, "state": s, "files": n} for (v, s), n in sorted(counts.items())],
        ["vendor", "state", "files"],
    )
    held = [r for r in rows if r["state"] != "accepted"]
    print_table("held back or flagged, and why", held, ["vendor", "path", "state", "reasons", "duplicate_of"])
    console.print(f"raw store: {ctx.store.url('raw')} — every input kept byte for byte")
