"""``sluice bench NAME --json FILE``: every benchmark measures itself and its reference in one run.

A benchmark is a module ``pipeline.bench.<name>`` with a function ``run(size: str, settings) -> dict``
returning one JSON object whose top-level numeric keys include the headline figures named in
BENCHMARKS.md. This command writes that object to ``--json`` and prints the top-level numbers.
"""

from __future__ import annotations

import importlib
import json
import platform
import time
from pathlib import Path

import typer

from pipeline.errors import UnknownChoiceError

BENCHMARKS = ("ingest", "read", "transcode", "plan", "stagger", "manifest", "warehouse", "dedup", "e2e")


def command(
    name: str = typer.Argument(..., help=f"One of: {', '.join(BENCHMARKS)}"),
    json_path: Path = typer.Option(None, "--json", help="Write the results object here."),
    size: str = typer.Option(
        "default", "--size", help="Scale: 'default' (minutes on 2 cores) or bench-specific."
    ),
    source: str = typer.Option(
        None, "--source", help="transcode only: what the source cameras carry (h264, jpeg, png)."
    ),
    rounds: int = typer.Option(
        None,
        "--rounds",
        min=1,
        help="transcode only: interleaved rounds (default: the size's); the 95% interval of each target "
        "ratio (ci95 in the --json file) narrows with about the square root of it.",
    ),
    footage: Path = typer.Option(
        None,
        "--footage",
        help="read only: the video the LeRobot anchor's cameras film as its second content "
        "(default: the shared corpus's real camera clip, when it is beside the project).",
    ),
) -> None:
    """Run a benchmark against its reference in the same run and write the results as JSON."""
    if name not in BENCHMARKS:
        raise UnknownChoiceError("benchmark", name, BENCHMARKS)
    from pipeline.settings import load_settings

    try:
        module = importlib.import_module(f"pipeline.bench.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"pipeline.bench.{name}":
            raise typer.BadParameter(f"benchmark {name!r} is not implemented yet") from None
        raise
    options: dict[str, object] = {}
    if source is not None:
        if name != "transcode":
            raise typer.BadParameter(f"--source is an option of the transcode bench, not of {name}")
        options["source"] = source
    if rounds is not None:
        if name != "transcode":
            raise typer.BadParameter(f"--rounds is an option of the transcode bench, not of {name}")
        options["rounds"] = rounds
    if footage is not None:
        if name != "read":
            raise typer.BadParameter(f"--footage is an option of the read bench, not of {name}")
        options["footage"] = footage
    if json_path is not None:
        _prepare_json(json_path)  # before the run: a run of minutes must not end unable to save its results
    started = time.time()
    results = module.run(size=size, settings=load_settings(), **options)
    results.setdefault("bench", name)
    results.setdefault("size", size)
    results.setdefault(
        "machine",
        {
            "python": platform.python_version(),
            "cpus": _cpus(),
            "cpu_model": _cpu_model(),
            "node": platform.node(),
        },
    )
    results.setdefault("wall_s", round(time.time() - started, 3))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n")
    from pipeline.cli._common import print_table

    print_table(
        f"sluice bench {name}",
        [
            {"figure": key, "value": f"{value:.4g}" if isinstance(value, float) else str(value)}
            for key, value in results.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        ],
        ["figure", "value"],
        justify_right=["value"],
    )


def _prepare_json(path: Path) -> None:
    """Make the folder of ``path`` and check that it takes a new file; ``typer.BadParameter`` naming the path
    and why not otherwise."""
    from pipeline.paths import file_refusal

    why_not = file_refusal(path)
    if why_not is not None:
        raise typer.BadParameter(f"--json {path} cannot be written: {why_not}")


def _cpu_model() -> str | None:
    """The processor's name as the kernel reports it (a VM's host can change between runs, and with it the
    codec's speed: results from different hosts do not pool)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))
