"""``sluice demo``: the main job end to end on embedded defaults, then everything it started is stopped.

1. validate the example vendors in ``dags/vendors``;
2. generate each vendor's synthetic drop where its config points (with a few named defects);
3. start what ``sluice run`` starts (:func:`pipeline.orchestrate.platform.local_platform`): the local
   Postgres under SLUICE_HOME (unless SLUICE_DATABASE_URL is set) with the catalog migrated, Airflow's
   metadata DB as a database of its own beside it, and the local Airflow's services (API server, scheduler
   with the LocalExecutor, DAG processor, triggerer) with the vendors' pools;
4. trigger each vendor's DAG from ``dags/`` once through the REST API, as ``sluice run`` and the trigger
   form do, with annotate and shard switched on in the run's conf, and follow every run to its end:
   discover, plan, ingest, pre-gate, transcode, post-gate, annotate, shard, warehouse sync;
5. build a versioned dataset from the warehouse (the runs' warehouse_sync tasks brought it up to date) and
   load its manifest as training rank 0 of 2 would; build the ROS 2 fleet's dataset (``kestrel_teleop``)
   and export it as a LeRobot v3 dataset under ``SLUICE_HOME/exports/lerobot/``;
6. print what ended where: the runs, the states per vendor and why each quarantined file was held back;
7. stop what it started (``--keep-running`` leaves it up, with the runs in the Airflow UI).

``--cluster`` runs the same demo in cluster mode on one machine
(:func:`pipeline.orchestrate.platform.cluster_platform`): the store on S3 through s3fs (moto's server),
Airflow on the CeleryExecutor with Redis as the broker and a Celery worker per queue, and the heavy steps on
a Ray head and worker node. Its end state is the single-machine demo's (tests/cluster/test_demo_cluster.py);
it also prints where each part ran: every task's Celery queue and host, the Ray node of every item of the
heavy steps (their ``ray_nodes`` counts, from XCom), and the ``s3://`` keys of the transcoded outputs.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pipeline.cli._common import console, print_table, warn

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pipeline.orchestrate.platform import Platform
    from pipeline.orchestrate.scheduled import ScheduledRun

#: Defects the demo drops carry, so the gate has something to show (corrupt_image only where the cameras
#: send still images or raw pixels: the ROS 2 example vendor's JPEG cameras).
ROBOT_DEFECTS = ("truncated", "crc_flipped", "clock_jump", "duplicate", "dropped_frames", "corrupt_image")
#: ``reencoded`` is a good clip again, smaller and at another quality: accepted, then grouped with its original
#: by the near-duplicate grouping, so that the dataset keeps one of the two.
VIDEO_DEFECTS = ("all_black", "rotated", "corrupt_bitstream", "zero_bytes", "reencoded", "colour_change")
#: The demo's runs switch on the two steps the example vendors leave off by default, as a user would from
#: the trigger form, so that every step runs.
DEMO_RUN_CONF = {"annotate": True, "shard": True}


def command(
    keep_running: bool = typer.Option(
        False, help="Leave Postgres and Airflow running afterwards (the demo's runs stay in the UI)."
    ),
    episodes: int = typer.Option(4, min=1, help="Clean robot episodes (and video clips) in each drop."),
    seconds: float = typer.Option(3.0, help="Length of each synthetic episode or clip."),
    cluster: bool = typer.Option(
        False,
        "--cluster",
        help="Cluster mode on this machine: the store on S3 (moto), Celery workers per queue on Redis, "
        "the heavy steps on a Ray head and worker node (docs/cluster.md).",
    ),
) -> None:
    """Run the main job end to end on embedded defaults (local Postgres and Airflow, generated drops)."""
    from pipeline.orchestrate.platform import cluster_platform, local_platform
    from pipeline.settings import load_settings

    settings = load_settings()
    t0 = time.monotonic()
    vendors = _validate(settings)
    # every drop's options checked before any drop folder is emptied or any service started
    configs = _drop_configs(vendors, episodes=episodes, seconds=seconds)
    drops = _make_drops(vendors, configs, settings)
    start = cluster_platform if cluster else local_platform
    with start(
        settings, keep_running=keep_running, say=lambda m: console.print(f"[green]✓[/] {m}")
    ) as platform:
        runs = _run_dags(vendors, platform)
        if cluster:
            _where_it_ran(platform, runs)
        if not all(run.succeeded for run in runs.values()):
            raise typer.Exit(1)
        _dataset(platform.settings)
        if "kestrel_ros2" in vendors:
            _lerobot_export(platform.settings)
        _summary(platform.settings, drops)
        console.print(f"\n[bold green]demo finished in {time.monotonic() - t0:.0f} s[/]")
        if keep_running:
            console.print(
                f"explore with `sluice files list`, `sluice status`, or the Airflow UI at {platform.airflow.url}"
            )
        elif cluster:  # the store the summary names is about to go: moto keeps its objects in memory
            console.print(
                "the S3 server stops with the demo, and the store's objects with it (kept in memory): run "
                "with --keep-running to look around with the commands above",
                highlight=False,
            )


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


def _drop_configs(vendors: dict[str, Any], *, episodes: int, seconds: float) -> dict[str, Any]:
    """Each vendor's synthetic drop, validated (a ConfigError naming the option, never pydantic's own)."""
    from pipeline.synth import RobotDropConfig, VideoDropConfig, build_config
    from pipeline.synth.defects import RobotDefect, VideoDefect, defect_applies
    from pipeline.synth.flavors import matching_flavor

    configs: dict[str, Any] = {}
    for name, vendor in vendors.items():
        if vendor.kind == "mcap":
            flavor = matching_flavor(vendor.topics.cameras if vendor.topics else ())
            configs[name] = build_config(
                RobotDropConfig,
                "sluice demo",
                episodes=episodes,
                seconds=seconds,
                flavor=flavor,
                defects=tuple(RobotDefect(d) for d in ROBOT_DEFECTS if defect_applies(d, flavor)),
            )
        else:
            configs[name] = build_config(
                VideoDropConfig,
                "sluice demo",
                clips=episodes,
                seconds=seconds,
                defects=tuple(VideoDefect(d) for d in VIDEO_DEFECTS),
                # tagged BT.709, as HD vendor footage is: the clips must say so, or readers shift its colours
                colour="bt709",
            )
    return configs


def _make_drops(vendors: dict[str, Any], configs: dict[str, Any], settings: Any) -> dict[str, Path]:
    from pipeline.config.models import local_source_path
    from pipeline.synth import RobotDropConfig, make_robot_drop, make_video_drop

    drops = {}
    for name, vendor in vendors.items():
        root = local_source_path(vendor.source.url, settings.project_dir_abs)
        shutil.rmtree(root, ignore_errors=True)
        with console.status(f"generating {name}'s drop in {root}…"):
            config = configs[name]
            if isinstance(config, RobotDropConfig):
                manifest = make_robot_drop(root, config, jobs=2)
            else:
                manifest = make_video_drop(root, config, jobs=2)
        if vendor.source.ready_marker:
            (root / vendor.source.ready_marker).touch()
        total = sum(f.size_bytes for f in manifest.files)
        console.print(f"[green]✓[/] {name}: {len(manifest.files)} files, {total / 1e6:.1f} MB in {root}")
        drops[name] = root
    return drops


def _run_dags(vendors: dict[str, Any], platform: Platform) -> dict[str, ScheduledRun]:
    """Each vendor's DAG, once, through the scheduler (all runs at once); vendor -> how its run ended."""
    from pipeline.orchestrate.scheduled import follow_run, run_conf, trigger_run
    from pipeline.steps.runner import build_context

    client = platform.airflow.client()
    started = {}
    for name, vendor in vendors.items():
        run_id, was_paused = trigger_run(client, name, run_conf(vendor, conf=DEMO_RUN_CONF))
        started[name] = (run_id, was_paused)
        console.print(f"[green]✓[/] triggered {name} run {run_id}")
    ctx = build_context(platform.settings)
    runs = {}
    try:
        for name, (run_id, was_paused) in started.items():
            with console.status(f"following the {name} run through the scheduler…"):
                run = follow_run(client, name, run_id, repause=was_paused, catalog=ctx.engine)
            mark = "[green]✓[/]" if run.succeeded else "[red]✖[/]"
            waits = sorted(run.queue_latency_s())
            latency = f", median queued→running {waits[len(waits) // 2]:.1f} s" if waits else ""
            span = run.span_s()
            took = f" in {span:.0f} s" if span is not None else ""
            console.print(
                f"{mark} DAG {name}: run {run.run_id} {run.state}{took} (pipeline run {run.outcome}{latency})"
            )
            for task_id, states in run.task_states().items():
                counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
                console.print(f"    {task_id}: {counts}", highlight=False)
            for failure in run.failures:
                if failure.error:
                    console.print(f"    [red]{failure.task}[/]: {failure.error}", highlight=False)
            for item in run.failed_items:
                console.print(
                    f"    [red]{item['step']} on {item['path']}[/]: {item['detail']}", highlight=False
                )
            runs[name] = run
    finally:
        ctx.engine.dispose()
    return runs


def _where_it_ran(platform: Platform, runs: dict[str, ScheduledRun]) -> None:
    """Cluster mode: each task's Celery queue and host, the heavy steps' Ray nodes, the outputs' S3 keys."""
    from pipeline.orchestrate.names import HEAVY_STEPS
    from pipeline.steps.runner import build_context

    client = platform.airflow.client()
    nodes = platform.ray.alive_nodes() if platform.ray is not None else {}
    ctx = build_context(platform.settings)
    try:
        outputs = transcoded_outputs(ctx.engine)
    finally:
        ctx.engine.dispose()
    for name, run in runs.items():
        console.print(f"[bold]where the {name} run ran[/]")
        placed: dict[str, Counter[str]] = {}
        on_ray: dict[str, Counter[str]] = {}
        for ti in run.task_instances:
            if ti["state"] != "success":
                continue
            worker = platform.workers.worker_name(ti["queue"]) if platform.workers else ti["queue"]
            placed.setdefault(ti["task_id"], Counter())[
                f"queue {ti['queue']} ({worker}, host {ti['hostname']})"
            ] += 1
            if ti["task_id"] in {s.value for s in HEAVY_STEPS}:
                counts = client.xcom(name, run.run_id, ti["task_id"], ti["map_index"]) or {}
                for node, n in (counts.get("ray_nodes") or {}).items():
                    on_ray.setdefault(ti["task_id"], Counter())[nodes.get(node, node[:12])] += n
        for task_id, where in placed.items():
            shown = "; ".join(f"{n}× {w}" for w, n in sorted(where.items()))
            console.print(f"    Celery  {task_id}: {shown}", highlight=False)
        for task_id, where in on_ray.items():
            shown = ", ".join(f"{n} items on Ray node {node}" for node, n in sorted(where.items()))
            console.print(f"    Ray     {task_id}: {shown}", highlight=False)
        for (vendor, path), made in sorted(outputs.items()):  # each run's own outputs under its heading
            if vendor == name:
                for uri, _ in made:
                    console.print(f"    S3      {vendor}/{path} → {uri}", highlight=False)


def transcoded_outputs(engine: Engine) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(vendor, source path) -> the (uri, sha256) of every transcode output made from it, from the catalog."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Artifact, Episode, SourceFile, Vendor

    with session_scope(make_session_factory(engine)) as session:
        rows = session.execute(
            select(Vendor.name, SourceFile.path, Artifact.uri, Artifact.sha256)
            .join(Episode, Episode.id == Artifact.episode_id)
            .join(SourceFile, SourceFile.id == Episode.source_file_id)
            .join(Vendor, Vendor.id == Episode.vendor_id)
            .where(Artifact.step == "transcode")
            .order_by(Vendor.name, SourceFile.path, Artifact.uri)
        ).all()
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for row in rows:
        out.setdefault((row.name, row.path), []).append((row.uri, row.sha256))
    return out


def _dataset(settings: Any) -> None:
    from pipeline.datasets import build, load_spec
    from pipeline.manifest.loader import open_manifest
    from pipeline.steps.runner import build_context

    ctx = build_context(settings)  # the DAG runs' warehouse_sync tasks brought the warehouse up to date
    spec = load_spec(settings.project_dir_abs / "dags" / "datasets" / "demo_accepted.yaml")
    version = build(spec, engine=ctx.engine, warehouse_path=settings.warehouse_path, store=ctx.store)
    from pipeline.cli.dataset import split_summary

    console.print(
        f"[green]✓[/] dataset {version.ref}: {split_summary(version)}; manifest {version.manifest_uri}"
    )
    for warning in version.warnings:
        warn(warning)
    paths = _source_paths(
        ctx.engine, [e for g in version.near_duplicates for e in (g["kept"], *g["dropped"])]
    )
    for group in version.near_duplicates:
        dropped = ", ".join(f"{e} ({paths.get(e, '?')})" for e in group["dropped"])
        console.print(
            f"[green]✓[/] near-duplicate group {group['group']}: kept episode {group['kept']} "
            f"({paths.get(group['kept'], '?')}), left out {dropped}"
        )
    if version.manifest_uri and version.row_count:
        manifest = open_manifest(
            version.manifest_uri,
            rank=0,
            world_size=2,
            split="train",
            cache_dir=settings.home_abs / "cache" / "manifests",
        )
        first = next(iter(manifest.batches(4)), None)
        where = (
            f"first batch of {first.num_rows} starts at episode {first.column('episode_id')[0]}"
            if first is not None
            else "its share of the train split is empty"
        )
        console.print(
            f"[green]✓[/] training rank 0 of 2 memory-mapped its share of the train split: manifest rows "
            f"{manifest.row_start}–{manifest.row_stop} of {manifest.total_rows}; {where}"
        )


def _lerobot_export(settings: Any) -> None:
    """The ROS 2 fleet's accepted episodes (transcoded by the runs) as a LeRobot v3 dataset: one robot and
    one contract, so one feature set (the demo's other dataset mixes robots and video clips)."""
    from pipeline.datasets import build, load_spec
    from pipeline.export import export_dataset_version
    from pipeline.steps.runner import build_context

    ctx = build_context(settings)
    spec = load_spec(settings.project_dir_abs / "dags" / "datasets" / "kestrel_teleop.yaml")
    version = build(spec, engine=ctx.engine, warehouse_path=settings.warehouse_path, store=ctx.store)
    out = settings.home_abs / "exports" / "lerobot" / version.name / version.version
    if out.exists():  # this demo's own export of the same version, from a demo before
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = export_dataset_version(ctx.engine, version.name, version.version, out, robot_type="kestrel_arm")
    info = json.loads((out / "meta" / "info.json").read_text())
    console.print(
        f"[green]✓[/] LeRobot v3 export of {version.name}@{version.version}: {report.episodes} episodes, "
        f"{report.frames} frames at {info['fps']} fps, observation.state of "
        f"{len(info['features']['observation.state']['names'])} and action of "
        f"{len(info['features']['action']['names'])} named columns, {len(report.checks)} checks passed: {out}"
    )


def _source_paths(engine: Any, episode_ids: list[int]) -> dict[int, str]:
    """``vendor/path`` of each episode's source file, to name near-duplicates by what the vendor sent."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Episode, SourceFile, Vendor

    with session_scope(make_session_factory(engine)) as session:
        rows = session.execute(
            select(Episode.id, Vendor.name, SourceFile.path)
            .join(SourceFile, SourceFile.id == Episode.source_file_id)
            .join(Vendor, Vendor.id == Episode.vendor_id)
            .where(Episode.id.in_(episode_ids))
        ).all()
    return {r.id: f"{r.name}/{r.path}" for r in rows}


def _summary(settings: Any, drops: dict[str, Path]) -> None:
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.queries import list_files
    from pipeline.cli.files import original_label
    from pipeline.cli.status import gather
    from pipeline.steps.runner import build_context
    from pipeline.ui.source import view_sources

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
    runs = [
        {
            "run": run["id"],
            "vendor": run["vendor"],
            "airflow run": f"{run['dag_id']}/{run['run_id']}",
            "outcome": run["outcome"],
            "warnings": "\n".join(f"{w['step']}: {w['detail']}" for w in run["warnings"]),
        }
        for run in gather(view_sources(settings), runs=len(drops), vendor=None)["runs"]
    ]
    print_table(
        "pipeline runs (`sluice status`)", runs, ["run", "vendor", "airflow run", "outcome", "warnings"]
    )
    print_table(
        "held back or flagged, and why",
        [r | {"duplicate_of": original_label(r)} for r in held],
        ["vendor", "path", "state", "reasons", "duplicate_of"],
    )
    console.print(f"raw store: {ctx.store.url('raw')} — every input kept byte for byte")
