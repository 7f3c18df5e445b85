"""``sluice run VENDOR_FILE``: run a vendor's DAG now, through the scheduler, and follow it to the end.

The run is triggered through the local Airflow's REST API with the trigger form's params (one toggle per
step), exactly as a run started from the UI. What is not up is started first (the local Postgres,
migrated; Airflow's metadata DB beside the catalog; the Airflow services) and stopped again when the run
ends. Every task's state is printed as it changes; the exit status is 0 only when the run succeeded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pipeline.cli._common import console

if TYPE_CHECKING:
    from pipeline.orchestrate.scheduled import ScheduledRun, TaskChange

STATE_STYLE = {
    "success": "green",
    "failed": "red",
    "upstream_failed": "red",
    "up_for_retry": "yellow",
    "skipped": "dim",
    "running": "cyan",
}


def command(
    vendor_file: Annotated[Path, typer.Argument(help="The vendor's file in the vendors folder.")],
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps",
            help="Comma-separated steps to run (every other step off), e.g. ingest,quality_pre; a run with "
            "every step off is refused.",
        ),
    ] = None,
    conf: Annotated[
        str | None,
        typer.Option("--conf", help="Run conf as JSON, e.g. '{\"annotate\": true}' (wins over --steps)."),
    ] = None,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="Trigger the run and return; leave what was started running.")
    ] = False,
    keep_running: Annotated[
        bool, typer.Option("--keep-running", help="Leave Postgres and Airflow running afterwards.")
    ] = False,
    timeout_s: Annotated[
        float | None,
        typer.Option("--timeout-s", help="Give up following the run after this many seconds (> 0)."),
    ] = None,
) -> None:
    """Run a vendor's DAG now through the Airflow scheduler and follow it; exit 0 only if it succeeded."""
    from pipeline.config import load_vendor
    from pipeline.errors import ConfigError
    from pipeline.orchestrate.platform import local_platform
    from pipeline.orchestrate.scheduled import follow_run, run_conf, trigger_run
    from pipeline.orchestrate.vendors import vendors_folder
    from pipeline.settings import load_settings
    from pipeline.steps.runner import build_context

    if timeout_s is not None and not timeout_s > 0:  # not NaN either
        raise typer.BadParameter(f"--timeout-s {timeout_s:g}: allowed: a number of seconds > 0")
    settings = load_settings()
    folder = vendors_folder(settings).resolve()
    if not vendor_file.is_file():
        raise ConfigError(str(vendor_file), [("", "no such vendor file")])
    if vendor_file.resolve().parent != folder:
        raise ConfigError(
            str(vendor_file),
            [
                (
                    "",
                    f"not in the vendors folder {folder}, which the DAGs are made from: move it there, or "
                    f"point SLUICE_VENDORS_DIR at {vendor_file.resolve().parent}",
                )
            ],
        )
    vendor = load_vendor(vendor_file, base_dir=settings.project_dir_abs)
    extra: dict[str, Any] = {}
    if conf:
        try:
            extra = json.loads(conf)
        except ValueError as exc:
            raise ConfigError("--conf", [("", f"not JSON: {exc}")]) from None
        if not isinstance(extra, dict):
            raise ConfigError("--conf", [("", "must be a JSON object of step toggles")])
    chosen = [s.strip() for s in steps.split(",") if s.strip()] if steps is not None else None
    toggles = run_conf(vendor, steps=chosen, conf=extra)  # refuses a run with every step off
    on = [step for step, enabled in toggles.items() if enabled]
    console.print(
        f"[bold]{vendor.name}[/]: running {', '.join(on)} (off: "
        f"{', '.join(s for s, e in toggles.items() if not e) or 'none'})"
    )
    with local_platform(
        settings, keep_running=keep_running or no_wait, say=lambda m: console.print(f"  {m}")
    ) as platform:
        client = platform.airflow.client()
        run_id, was_paused = trigger_run(client, vendor.name, toggles)
        url = f"{platform.airflow.url}/dags/{vendor.name}/runs/{run_id}"
        console.print(f"triggered run [bold]{run_id}[/] ({url})")
        if no_wait:
            if was_paused:
                console.print(f"  {vendor.name} was paused: it is unpaused now, for this run to start")
            return
        ctx = build_context(settings)
        try:
            run = follow_run(
                client,
                vendor.name,
                run_id,
                on_change=_print_change,
                timeout_s=timeout_s,
                repause=was_paused,
                catalog=ctx.engine,
            )
        finally:
            ctx.engine.dispose()
        _print_result(run)
    if not run.succeeded:
        raise typer.Exit(1)


def _print_change(change: TaskChange) -> None:
    style = STATE_STYLE.get(change.state, "")
    attempt = f" (try {change.try_number})" if change.try_number > 1 else ""
    state = f"[{style}]{change.state}[/]" if style else change.state
    console.print(f"  {change.at_s:7.1f} s  {change.task:<18} {state}{attempt}", highlight=False)


def _print_result(run: ScheduledRun) -> None:
    from pipeline.discover import DiscoveryIssue
    from pipeline.enums import RunOutcome

    warned = run.outcome == RunOutcome.SUCCEEDED_WITH_WARNINGS.value
    mark = "[red]✖[/]" if not run.succeeded else "[yellow]⚠[/]" if warned else "[green]✓[/]"
    outcome = f", pipeline run {run.outcome}" if run.outcome else ""
    console.print(f"{mark} run {run.state} in {run.seconds:.0f} s{outcome}")
    idle = [e for e in run.warnings if e.get("code") in {i.value for i in DiscoveryIssue}]
    if idle and run.succeeded:  # a run that had nothing to do is not a green run
        console.print(f"  [yellow]nothing was processed[/]: {idle[0].get('detail')}", highlight=False)
    for task_id, states in run.task_states().items():
        console.print(
            f"    {task_id}: {', '.join(f'{n} {s}' for s, n in sorted(states.items()))}", highlight=False
        )
    for entry in run.warnings:  # the catalog's record: critical failures and warnings alike
        kind = "[red]failure[/]" if entry.get("critical") else "[yellow]warning[/]"
        console.print(f"  {kind} {entry.get('step')}: {entry.get('detail')}", highlight=False)
    for failure in run.failures:
        if failure.error:
            console.print(f"  [red]{failure.task} {failure.state}[/]: {failure.error}", highlight=False)
    for item in run.failed_items:
        console.print(f"  [red]{item['step']} failed on {item['path']}[/]: {item['detail']}", highlight=False)
