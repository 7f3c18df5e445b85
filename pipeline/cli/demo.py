"""``sluice demo``: the main job end to end on embedded defaults, then everything it started is stopped.

1. start the local Postgres under SLUICE_HOME (unless SLUICE_DATABASE_URL is set) and migrate the catalog;
2. validate the example vendors in ``dags/vendors``;
3. generate each vendor's synthetic drop where its config points (with a few named defects);
4. ingest and pre-gate both drops;
5. transcode the accepted inputs into training-shaped episodes and clips, and run the post-gate;
6. sync the DuckDB warehouse, build a versioned dataset and load its manifest as training rank 0 of 2 would;
7. print what ended where: states per vendor and why each quarantined file was held back.
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
        items = _ingest(vendors, settings)
        _transcode(vendors, settings, items)
        _dataset(settings)
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


def _ingest(vendors: dict[str, Any], settings: Any) -> dict[str, list[Any]]:
    from pipeline.steps.base import WorkItem
    from pipeline.steps.runner import build_context
    from pipeline.vendor_ingest import discover_vendor, ingest_vendor

    ctx = build_context(settings)
    items = {}
    for name, vendor in vendors.items():
        with console.status(f"ingesting and gating {name}…"):
            report = ingest_vendor(vendor, ctx, settle_s=0.0)
        steps = ", ".join(
            f"{step}: {s['succeeded']} ok / {s['rejected']} rejected / {s['skipped']} already done"
            for step, s in report.steps.items()
        )
        console.print(f"[green]✓[/] {name}: {report.discovered} files — {steps}")
        found = discover_vendor(vendor, ctx, settle_s=0.0)
        items[name] = [
            WorkItem(key=c.path, source_path=c.path, size_bytes=c.size_bytes) for c in found.candidates
        ]
    return items


def _transcode(vendors: dict[str, Any], settings: Any, items: dict[str, list[Any]]) -> None:
    from pipeline.enums import StepName
    from pipeline.orchestrate.batch import episode_items
    from pipeline.steps.registry import step_class
    from pipeline.steps.runner import build_context, run_step

    ctx = build_context(settings)
    for name, vendor in vendors.items():
        episodes = episode_items(ctx, vendor, [i.source_path for i in items[name]])
        for step_name in (StepName.TRANSCODE, StepName.QUALITY_POST):
            with console.status(f"{step_name} {name}…"):
                summary = run_step(step_class(step_name)(vendor, ctx), episodes)
            console.print(
                f"[green]✓[/] {step_name} {name}: {summary.succeeded} ok / {summary.rejected} rejected / "
                f"{summary.skipped} already done ({summary.seconds:.0f} s)"
            )


def _dataset(settings: Any) -> None:
    from pipeline.datasets import build, load_spec
    from pipeline.manifest.loader import open_manifest
    from pipeline.steps.runner import build_context
    from pipeline.warehouse import sync

    ctx = build_context(settings)
    report = sync(ctx.engine, settings.warehouse_path)
    console.print(f"[green]✓[/] warehouse synced into {settings.warehouse_path} ({report.rows_moved} rows)")
    spec = load_spec(settings.project_dir_abs / "dags" / "datasets" / "demo_accepted.yaml")
    version = build(spec, engine=ctx.engine, warehouse_path=settings.warehouse_path, store=ctx.store)
    console.print(
        f"[green]✓[/] dataset {version.ref}: {version.row_count} rows, splits {version.split_counts}, "
        f"manifest {version.manifest_uri}"
    )
    if version.manifest_uri and version.row_count:
        manifest = open_manifest(
            version.manifest_uri, rank=0, world_size=2, cache_dir=settings.home_abs / "cache" / "manifests"
        )
        first = next(iter(manifest.batches(4)))
        console.print(
            f"[green]✓[/] training rank 0 of 2 memory-mapped the manifest: rows {manifest.row_start}–"
            f"{manifest.row_stop} of {manifest.total_rows}; first batch of {first.num_rows} starts at "
            f"episode {first.column('episode_id')[0]}"
        )


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
