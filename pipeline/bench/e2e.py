"""``sluice bench e2e``: from a new vendor drop to a training rank's first batch, and how long training waits.

**Time to first batch** (``time_to_first_batch_s``). The clock starts when a synthetic drop of a vendor the
platform has never seen is complete (its ready marker written) and stops when a training rank holds its
first batch of decoded samples:

1. ``dag``: the vendor's DAG from ``dags/`` runs once through the real scheduler, triggered through the
   REST API as ``sluice run`` does (discover, plan, ingest, pre-gate, transcode, post-gate, warehouse sync;
   the vendor's defaults leave annotate and shard off, and a first batch needs neither);
2. ``dataset``: a dataset version over the vendor is built from the warehouse and its manifest written;
3. ``manifest``: training rank 0 fetches the manifest into its node cache and memory-maps its share;
4. ``first_batch``: :class:`pipeline.reader.SampleLoader` (the product's loader, as a training job uses it)
   reads its first batch of samples through :class:`pipeline.reader.EpisodeReader`.

The throwaway Postgres, Airflow's metadata DB on it, the Airflow services (API server, scheduler with the
LocalExecutor, DAG processor, triggerer) and the drop are made before the clock starts: a running platform
has them. The scheduler's own latency is reported beside: how long each task instance waited between
being queued and running (``scheduler_queue_latency_s_*``), and what the DAG's tasks themselves took.

The same chain with ``airflow dags test`` in place of the scheduler (every task in one process, in order,
no executor) runs after it on a second new vendor with a drop of its own, and is reported beside
(``time_to_first_batch_dags_test_s``): the difference is what the scheduler path costs.

**Data stall** (``data_stall_pct``). A simulated training loop over the manifest's train split: each step
takes a batch from the loader, then "computes" for ``step_ms`` (a sleep: the accelerator's time, during
which the host's cores are free); the loader prefetches batches on ``loader_workers`` worker processes
(``SampleLoader(processes=True)``: decoding and the Python around it run past the GIL, and the decoded
frames come back in shared memory), each with its own readers. Stall = the share of the loop's wall time
spent waiting for a batch, from the first step after one warm-up batch (``sweep_steps`` steps; the prefetch
queue fills during the first of them), as this benchmark has always measured it. Beside it
(``*_steady``): the same loops over ``steady_steps`` steps after ``warmup_steps`` in which the queue fills
from empty, the wait a long training run sees at every step once it runs. The
same loop with a synchronous loader (no prefetch) is measured beside it, and the step times at which the
prefetching loader stops stalling are found by running a few (``data_stall_pct_50ms`` and ``_100ms`` the
headline; the same sweep with worker threads beside it). ``samples_per_s_per_core``: the process loader
with no step time at all, samples per second over the cores its workers can use; ``cpu_ms_per_sample``:
what each sample cost there in CPU, in the training process and in the workers.

A sample is the reader's default: 2 s of resampled state and actions plus 2 decoded frames from each camera.
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import SluiceError, UnknownChoiceError
from pipeline.settings import Settings

if TYPE_CHECKING:
    from pipeline.manifest import Manifest

log = logging.getLogger(__name__)

VENDOR = "e2e_robotics"
#: A second new vendor, run with ``airflow dags test`` for the figure beside the scheduler's.
DAGS_TEST_VENDOR = "e2e_robotics_dags_test"
DATASET = "e2e_first_batch"

SIZES: dict[str, dict[str, Any]] = {
    # 6 episodes of 4 s, three 320x240 cameras: a first drop of a new vendor, small enough for 2 cores.
    "default": {
        "episodes": 6,
        "seconds": 4.0,
        "width": 320,
        "height": 240,
        "batch_size": 8,
        "loader_workers": 2,
        "loader_processes": True,
        "prefetch_batches": 4,
        "step_ms": 200.0,
        "steps": 40,
        "step_ms_sweep": [25.0, 50.0, 100.0, 200.0, 400.0],
        "sweep_steps": 20,
        # steady state: 10 steps for the prefetch queue to fill, then 40 measured (20 from the start too)
        "warmup_steps": 10,
        "steady_steps": 40,
    },
    "small": {
        "episodes": 2,
        "seconds": 3.0,
        "width": 160,
        "height": 120,
        "batch_size": 4,
        "loader_workers": 2,
        "loader_processes": True,
        "prefetch_batches": 2,
        "step_ms": 100.0,
        "steps": 10,
        "step_ms_sweep": [50.0, 200.0],
        "sweep_steps": 6,
        "warmup_steps": 3,
        "steady_steps": 6,
    },
    "large": {
        "episodes": 24,
        "seconds": 10.0,
        "width": 640,
        "height": 480,
        "batch_size": 16,
        "loader_workers": 2,
        "loader_processes": True,
        "prefetch_batches": 4,
        "step_ms": 400.0,
        "steps": 60,
        "step_ms_sweep": [50.0, 100.0, 200.0, 400.0, 800.0],
        "sweep_steps": 30,
        "warmup_steps": 10,
        "steady_steps": 60,
    },
}
#: Seconds of history a sample needs before its time (the reader's default window).
WINDOW_S = 2.0
SEED = 7


def run(size: str, settings: Settings) -> dict[str, Any]:
    """Time a new drop to its first training batch, then measure data stall; see the module docstring."""
    if size not in SIZES:
        raise UnknownChoiceError("--size", size, sorted(SIZES))
    options = SIZES[size]
    base = settings.home_abs / "bench" / "e2e"
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=base))
    os.chmod(work, 0o755)  # the local Postgres may run as another user and must reach its folder
    try:
        return _run(work, options, size)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(work: Path, options: dict[str, Any], size: str) -> dict[str, Any]:
    from pipeline.airflow_local import LocalAirflow, PoolSpec, settings_env
    from pipeline.catalog import make_engine, migrate
    from pipeline.config import DEFAULT_POOLS
    from pipeline.pgserver import LocalPostgres

    wall_started = time.perf_counter()
    server = LocalPostgres(work / "pg", fast=True)
    url = server.up()
    airflow: LocalAirflow | None = None
    try:
        migrate.upgrade(url)
        vendors_dir = work / "vendors"
        vendors_dir.mkdir()
        for name in (VENDOR, DAGS_TEST_VENDOR):
            (vendors_dir / f"{name}.yaml").write_text(_vendor_yaml(name, work / "drops" / name))
        home = work / "home"
        settings = Settings(home=home, database_url=url, vendors_dir=vendors_dir)
        airflow = LocalAirflow(
            home / "airflow",
            sluice_env=settings_env(settings),
            metadata_url=server.create_database("airflow"),
        )
        staged = {
            name: _make_drop(work / f"{name}.partial", options, seed=seed)
            for name, seed in ((VENDOR, 0), (DAGS_TEST_VENDOR, 1))
        }
        airflow.up(pools={n: PoolSpec(p["slots"], p["description"]) for n, p in DEFAULT_POOLS.items()})
        client = airflow.client()
        client.wait_for_dags([VENDOR, DAGS_TEST_VENDOR])
        engine = make_engine(url)
        try:
            scheduled = _first_batch(work, options, settings, engine, staged[VENDOR], VENDOR, airflow)
            dags_test = _first_batch(
                work, options, settings, engine, staged[DAGS_TEST_VENDOR], DAGS_TEST_VENDOR, airflow
            )
            stall = _stall(scheduled["manifest"], options)
        finally:
            engine.dispose()
    finally:
        if airflow is not None:
            airflow.down()
        server.destroy()

    run = scheduled["run"]
    waits = sorted(run.queue_latency_s())
    tasks = _task_seconds(run)
    phases = scheduled["phases"]
    results: dict[str, Any] = {
        "time_to_first_batch_s": scheduled["seconds"],
        "time_to_first_batch_dags_test_s": dags_test["seconds"],
        "scheduler_queue_latency_s_median": round(statistics.median(waits), 3),
        "scheduler_queue_latency_s_p90": round(waits[int(0.9 * (len(waits) - 1))], 3),
        "scheduler_queue_latency_s_max": round(waits[-1], 3),
        "scheduler_queue_latency_s_total": round(sum(waits), 3),
        # the headline as this benchmark has always measured it: from the first step after one warm-up
        # batch, the prefetch queue's filling included
        "data_stall_pct": stall["prefetch"]["stall_pct_from_start"],
        "data_stall_pct_50ms": _stall_at(stall["sweep"], 50.0, "stall_pct_from_start"),
        "data_stall_pct_100ms": _stall_at(stall["sweep"], 100.0, "stall_pct_from_start"),
        "data_stall_pct_50ms_threads": _stall_at(stall["sweep_threads"], 50.0, "stall_pct_from_start"),
        "data_stall_pct_100ms_threads": _stall_at(stall["sweep_threads"], 100.0, "stall_pct_from_start"),
        # beside: the steady state a long training run sees, once the prefetch queue has filled
        "data_stall_pct_steady": stall["prefetch"]["stall_pct"],
        "data_stall_pct_50ms_steady": _stall_at(stall["sweep"], 50.0),
        "data_stall_pct_100ms_steady": _stall_at(stall["sweep"], 100.0),
        "data_stall_pct_50ms_threads_steady": _stall_at(stall["sweep_threads"], 50.0),
        "data_stall_pct_100ms_threads_steady": _stall_at(stall["sweep_threads"], 100.0),
        "samples_per_s_per_core": stall["throughput"]["samples_per_s_per_core_from_start"],
        "samples_per_s_per_core_steady": stall["throughput"]["samples_per_s_per_core"],
        "samples_per_cpu_s": stall["throughput"]["samples_per_cpu_s"],
        "cpu_ms_per_sample": stall["throughput"]["cpu_ms_per_sample"],
        "loader_processes": options["loader_processes"],
        "data_stall_pct_synchronous": stall["synchronous"]["stall_pct_from_start"],
        "data_stall_pct_synchronous_steady": stall["synchronous"]["stall_pct"],
        "step_ms": options["step_ms"],
        "batch_size": options["batch_size"],
        "loader_workers": options["loader_workers"],
        "prefetch_batches": options["prefetch_batches"],
        "stall_warmup_steps": options["warmup_steps"],
        "stall_steps": {"prefetch": options["steps"], "sweep": options["sweep_steps"]},
        "stall_steps_steady": {"prefetch": options["steps"], "sweep": options["steady_steps"]},
        "batch_ms_median": stall["synchronous"]["batch_ms_median"],
        "samples_per_s_one_worker": stall["synchronous"]["samples_per_s"],
        "phase_seconds": {k: round(v, 3) for k, v in phases.items()},
        "phase_seconds_dags_test": {k: round(v, 3) for k, v in dags_test["phases"].items()},
        "dag_task_seconds": tasks,
        "dag_task_seconds_dags_test": _task_seconds(dags_test["run"]),
        # What the DAG phase spent outside the tasks' own running time: scheduling, queueing, task start-up.
        "dag_scheduler_overhead_s": round(phases["dag"] - sum(tasks.values()), 3),
        "dag_process_overhead_dags_test_s": round(
            dags_test["phases"]["dag"] - sum(_task_seconds(dags_test["run"]).values()), 3
        ),
        "episodes": scheduled["episodes"],
        "manifest_rows": scheduled["manifest"].total_rows,
        "first_batch_samples": scheduled["first_batch_samples"],
        "dataset_version": scheduled["version"],
        "stall_by_step_ms": stall["sweep"],
        "stall_by_step_ms_threads": stall["sweep_threads"],
        "throughput": stall["throughput"],
        # Series for the report's line plots: stall % over the swept step times, and the wait of each step.
        "data_stall_pct_over_step_ms": [row["stall_pct_from_start"] for row in stall["sweep"]],
        "wait_ms_per_step": stall["prefetch"]["wait_ms"],
        "size": size,
        "drop": {k: options[k] for k in ("episodes", "seconds", "width", "height")},
        "cpus": len(os.sched_getaffinity(0)),
        "load_average": os.getloadavg(),
        "wall_s": round(time.perf_counter() - wall_started, 1),
    }
    return results


def _first_batch(
    work: Path,
    options: dict[str, Any],
    settings: Settings,
    engine: Any,
    staged: Path,
    vendor: str,
    airflow: Any,
) -> dict[str, Any]:
    """From the drop appearing to a first batch in training, through the scheduler (``VENDOR``) or through
    ``airflow dags test`` (``DAGS_TEST_VENDOR``); see the module docstring."""
    from pipeline.orchestrate.dag_test import run_dag
    from pipeline.orchestrate.scheduled import follow_run, trigger_run
    from pipeline.store import Store

    drop = work / "drops" / vendor
    drop.parent.mkdir(exist_ok=True)
    # -- the clock starts: the drop appears, complete ------------------------------------------------------
    t0 = time.perf_counter()
    staged.rename(drop)
    (drop / "_READY").touch()
    run: Any
    if vendor == DAGS_TEST_VENDOR:
        run = run_dag(airflow, vendor)
        if not run.succeeded:
            raise BenchRunFailed(f"the {vendor} DAG run ended {run.state}; see {run.log_path}")
    else:
        client = airflow.client()
        run_id, _ = trigger_run(client, vendor, {})
        run = follow_run(client, vendor, run_id, timeout_s=3600)
        if not run.succeeded:
            raise BenchRunFailed(f"the {vendor} DAG run ended {run.state}: {run.failures}")
    t_dag = time.perf_counter()
    store = Store(settings.home_abs / "store")
    version = _build_dataset(work, engine, settings, store, vendor)
    t_dataset = time.perf_counter()
    manifest = _open_manifest(version.manifest_uri, work / "cache" / vendor)
    t_manifest = time.perf_counter()
    # The loader a training job starts with; nothing is prefetched yet when the first batch is asked for.
    # Imported on the clock, as a training process imports it: the reader pulls in PyAV and numpy.
    from pipeline.reader import SampleLoader

    loader = SampleLoader(
        manifest,
        options["batch_size"],
        workers=options["loader_workers"],
        prefetch=0,
        seed=SEED,
        window_s=WINDOW_S,
    )
    first = next(iter(loader))
    t_first = time.perf_counter()
    loader.close()
    # -- the clock stops -----------------------------------------------------------------------------------
    return {
        "seconds": round(t_first - t0, 3),
        "phases": {
            "dag": t_dag - t0,
            "dataset": t_dataset - t_dag,
            "manifest": t_manifest - t_dataset,
            "first_batch": t_first - t_manifest,
        },
        "run": run,
        "manifest": manifest,
        "version": version.ref,
        "episodes": len(loader.uris),
        "first_batch_samples": len(first),
    }


class BenchRunFailed(SluiceError):
    """The pipeline under measurement did not finish (the benchmark has no figure to report)."""


# -- set-up -----------------------------------------------------------------------------------------------


def _vendor_yaml(name: str, drop: Path) -> str:
    """The Acme example vendor under a new name, reading ``drop`` once its ready marker is there."""
    import yaml

    repo = Path(__file__).resolve().parents[2]
    data = yaml.safe_load((repo / "dags" / "vendors" / "acme_robotics.yaml").read_text())
    data["name"] = name
    data["source"] = {**data["source"], "url": str(drop), "settle_s": 0, "ready_marker": "_READY"}
    data["schedule"] = {"cron": None}
    # One batch per core and no start offsets: staggering protects a busy scheduler, and would only add its
    # offsets to a single vendor's first run.
    data["planner"] = {**data.get("planner", {}), "max_splits": 2, "batch_stagger_s": 0}
    return yaml.safe_dump(data, sort_keys=False)


def _make_drop(folder: Path, options: dict[str, Any], *, seed: int) -> Path:
    from pipeline.synth import RobotDropConfig, make_robot_drop

    config = RobotDropConfig(
        episodes=options["episodes"],
        seconds=options["seconds"],
        width=options["width"],
        height=options["height"],
        seed=seed,  # each vendor's bytes its own: a copy would be recorded as the other's duplicates
    )
    make_robot_drop(folder, config, jobs=2)
    return folder


def _build_dataset(work: Path, engine: Any, settings: Settings, store: Any, vendor: str) -> Any:
    import yaml

    from pipeline.datasets import build, load_spec

    name = f"{DATASET}_{vendor}"
    spec_file = work / f"{name}.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "description": "every accepted episode of the new vendor, all in train",
                "filter": {"where": "vendor IN $vendors AND is_accepted", "params": {"vendors": [vendor]}},
                "splits": {"group_by": ["session_id"], "seed": 1, "val_fraction": 0.0, "eval_fraction": 0.0},
            },
            sort_keys=False,
        )
    )
    version = build(load_spec(spec_file), engine=engine, warehouse_path=settings.warehouse_path, store=store)
    if not version.manifest_uri or not version.row_count:
        raise BenchRunFailed(f"dataset {version.ref} has no rows: nothing of the drop was accepted")
    return version


def _open_manifest(uri: str, cache_dir: Path) -> Manifest:
    from pipeline.manifest.loader import open_manifest

    return open_manifest(uri, rank=0, world_size=1, cache_dir=cache_dir)


def _task_seconds(run: Any) -> dict[str, float]:
    """Seconds each task (all its mapped instances) ran, from a scheduled run's API records or a
    ``dags test`` run's metadata rows."""
    seconds: dict[str, float] = {}
    for ti in run.task_instances:
        if isinstance(ti, dict):
            task_id, ran = ti["task_id"], ti.get("duration")
        else:
            task_id = ti.task_id
            ran = ti.end_s - ti.start_s if ti.start_s is not None and ti.end_s is not None else None
        if ran is not None:
            seconds[task_id] = round(seconds.get(task_id, 0.0) + float(ran), 3)
    return seconds


# -- data stall -------------------------------------------------------------------------------------------


def _stall_at(sweep: list[dict[str, float]], step_ms: float, key: str = "stall_pct") -> float | None:
    return next((row[key] for row in sweep if row["step_ms"] == step_ms), None)


def _loop(
    manifest: Manifest,
    *,
    batch_size: int,
    workers: int,
    prefetch: int,
    step_ms: float,
    steps: int,
    warmup_steps: int,
    from_start_steps: int,
    processes: bool = False,
) -> dict[str, Any]:
    """A training loop: take a batch, then compute for ``step_ms``; ``warmup_steps + steps`` steps (at least
    ``from_start_steps``) after a first batch that makes the workers' decoders.

    ``stall_pct`` is the share of wall time spent waiting over the last ``steps`` steps, after
    ``warmup_steps`` in which the prefetch queue fills from empty: what a training run sees at every step
    once it runs. ``stall_pct_from_start`` is the same share over the first ``from_start_steps`` steps,
    counting the queue's filling, as this benchmark measured before. ``cpu_ms_per_sample`` is the CPU time
    of the training process and of the worker processes over the last ``steps`` steps, per sample taken.
    """
    import psutil

    from pipeline.reader import SampleLoader

    loader = SampleLoader(
        manifest,
        batch_size,
        workers=workers,
        prefetch=prefetch,
        seed=SEED,
        window_s=WINDOW_S,
        processes=processes,
    )
    total = max(warmup_steps + steps, from_start_steps)
    asked, got, done = [], [], []
    try:
        loader.open_readers()
        batches = iter(loader)
        next(batches)  # warm-up: decoders made (time to first batch is measured apart)
        me = psutil.Process()
        for step in range(total):
            if step == total - steps:
                cpu = (time.process_time(), _children_cpu_s(me))
            asked.append(time.perf_counter())
            next(batches)
            got.append(time.perf_counter())
            time.sleep(step_ms / 1000)
            done.append(time.perf_counter())
        cpu_end = (time.process_time(), _children_cpu_s(me))
    finally:
        loader.close()
    waits = [g - a for a, g in zip(asked, got, strict=True)]
    first = total - steps
    steady_wall = done[-1] - asked[first]
    taken = batch_size * steps
    return {
        "stall_pct": round(100 * sum(waits[first:]) / steady_wall, 2),
        "stall_pct_from_start": round(
            100 * sum(waits[:from_start_steps]) / (done[from_start_steps - 1] - asked[0]), 2
        ),
        "wait_ms": [round(w * 1000, 2) for w in waits],
        "batch_ms_median": round(1000 * statistics.median(waits[first:]), 2),
        "samples_per_s": round(taken / sum(waits[first:]), 1) if prefetch == 0 else None,
        "samples_per_s_taken": round(taken / steady_wall, 1),
        "samples_per_s_taken_from_start": round(
            batch_size * from_start_steps / (done[from_start_steps - 1] - asked[0]), 1
        ),
        "cpu_ms_per_sample": {
            "training_process": round(1000 * (cpu_end[0] - cpu[0]) / taken, 2),
            "workers": round(1000 * (cpu_end[1] - cpu[1]) / taken, 2) if processes else 0.0,
        },
        "wall_s": round(done[-1] - asked[0], 3),
    }


def _children_cpu_s(process: Any) -> float:
    """CPU seconds (user + system) of ``process``'s live children: a loader's worker processes."""
    import psutil

    seconds = 0.0
    for child in process.children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # ended meanwhile
            continue
        seconds += times.user + times.system
    return seconds


def _stall(manifest: Manifest, options: dict[str, Any]) -> dict[str, Any]:
    common = {
        "batch_size": options["batch_size"],
        "warmup_steps": options["warmup_steps"],
    }
    processes = bool(options["loader_processes"])
    long_run = {"steps": options["steps"], "from_start_steps": options["steps"]}
    synchronous = _loop(manifest, **common, **long_run, workers=1, prefetch=0, step_ms=options["step_ms"])
    prefetch = _loop(
        manifest,
        **common,
        **long_run,
        workers=options["loader_workers"],
        prefetch=options["prefetch_batches"],
        step_ms=options["step_ms"],
        processes=processes,
    )
    sweep_run = {"steps": options["steady_steps"], "from_start_steps": options["sweep_steps"]}
    sweeps: dict[bool, list[dict[str, float]]] = {processes: [], False: []}
    for step_ms in options["step_ms_sweep"]:
        for kind in sweeps:  # processes and threads alternate, so that load falls on both alike
            row = _loop(
                manifest,
                **common,
                **sweep_run,
                workers=options["loader_workers"],
                prefetch=options["prefetch_batches"],
                step_ms=step_ms,
                processes=kind,
            )
            sweeps[kind].append(
                {
                    "step_ms": step_ms,
                    "stall_pct": row["stall_pct"],
                    "stall_pct_from_start": row["stall_pct_from_start"],
                }
            )
    flat_out = _loop(
        manifest,
        **common,
        **sweep_run,
        workers=options["loader_workers"],
        prefetch=options["prefetch_batches"],
        step_ms=0.0,
        processes=processes,
    )
    cores = min(options["loader_workers"], len(os.sched_getaffinity(0)))
    cpu = flat_out["cpu_ms_per_sample"]
    throughput = {
        "samples_per_s": flat_out["samples_per_s_taken"],
        "samples_per_s_from_start": flat_out["samples_per_s_taken_from_start"],
        "cores": cores,
        "samples_per_s_per_core": round(flat_out["samples_per_s_taken"] / cores, 1),
        "samples_per_s_per_core_from_start": round(flat_out["samples_per_s_taken_from_start"] / cores, 1),
        "cpu_ms_per_sample": cpu,
        # what a sample costs in CPU wherever it is spent: the training process and the workers
        "samples_per_cpu_s": round(1000 / (cpu["training_process"] + cpu["workers"]), 1),
    }
    return {
        "synchronous": synchronous,
        "prefetch": prefetch,
        "sweep": sweeps[processes],
        "sweep_threads": sweeps[False],
        "throughput": throughput,
    }
