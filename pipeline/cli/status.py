"""``sluice status``: the latest runs and what needs attention (failed runs, warnings, quarantines by reason,
failed steps, files still pending)."""

from __future__ import annotations

from typing import Any

import typer

from pipeline.cli._common import console, print_json, print_table

#: The most runs --runs shows: far past a screen, and inside Postgres's bigint (a larger LIMIT overflows it).
MAX_RUNS = 100_000


def command(
    runs: int = typer.Option(10, "--runs", min=1, max=MAX_RUNS, help="How many of the latest runs to show."),
    vendor: str = typer.Option(None, help="Only this vendor."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Show the latest runs and what needs attention, read from the catalog (read-only)."""
    from pipeline.settings import load_settings
    from pipeline.ui.source import view_sources

    status = gather(view_sources(load_settings()), runs=runs, vendor=vendor)
    if as_json:
        print_json(status)
        return
    _print(status)


def gather(sources: Any, *, runs: int, vendor: str | None) -> dict[str, Any]:
    """The status as plain data (what ``--json`` prints)."""
    from pipeline.catalog import views
    from pipeline.catalog.queries import require_vendor

    with sources.session() as session:
        if vendor is not None:
            require_vendor(session, vendor)
        latest = views.latest_runs(session, limit=runs, vendor=vendor)
        reasons = views.quarantine_reasons(session, vendor=vendor)
        failed = views.step_problems(session, limit=20)
        states = views.file_state_counts(session)
        pending = views.pending_files(session)
    if vendor is not None:
        failed = [f for f in failed if f.vendor == vendor]
        states = [s for s in states if s.vendor == vendor]
    attention = views.needs_attention(latest)
    return {
        "runs": [r.as_dict() for r in latest],
        "attention": {
            "failed_runs": [r.id for r in attention if r.outcome == "failed"],
            "runs_with_warnings": [r.id for r in attention if r.outcome == "succeeded_with_warnings"],
            "quarantined_by_reason": [r.__dict__ for r in reasons],
            "failed_steps": [f.as_dict() for f in failed],
            "pending_files": pending,
        },
        "files": [s.__dict__ for s in states],
    }


def _print(status: dict[str, Any]) -> None:
    rows = []
    for run in status["runs"]:
        entries = [f"✖ {e['step']}: {e['detail']}" for e in run["failures"]]
        entries += [f"⚠ {e['step']}: {e['detail']}" for e in run["warnings"]]
        off = [step for step, on in run["step_toggles"].items() if not on]
        rows.append(
            {
                "run": run["id"],
                "vendor": run["vendor"],
                "airflow run": f"{run['dag_id']}/{run['run_id']}",
                "started": f"{run['started_at']:%Y-%m-%d %H:%M}",
                "outcome": run["outcome"],
                "steps off": ", ".join(off),
                "failures / warnings": "\n".join(entries),
            }
        )
    if rows:
        print_table("latest runs", rows, list(rows[0]))
    else:
        console.print("no pipeline runs recorded yet")
    attention = status["attention"]
    nothing = not any(
        (
            attention["failed_runs"],
            attention["runs_with_warnings"],
            attention["quarantined_by_reason"],
            attention["failed_steps"],
            attention["pending_files"],
        )
    )
    console.print("\n[bold]needs attention[/]" + (": nothing" if nothing else ""))
    # run ids, said as ids ("failed runs: 3" read as a count)
    if attention["failed_runs"]:
        console.print(f"[red]failed runs:[/] {', '.join(f'#{r}' for r in attention['failed_runs'])}")
    if attention["runs_with_warnings"]:
        console.print(
            f"[yellow]runs with warnings:[/] {', '.join(f'#{r}' for r in attention['runs_with_warnings'])}"
        )
    if attention["pending_files"]:
        console.print(f"files still pending: {attention['pending_files']}")
    if attention["quarantined_by_reason"]:
        print_table(
            "quarantined, by reason", attention["quarantined_by_reason"], ["vendor", "reason", "files"]
        )
    if attention["failed_steps"]:
        print_table(
            "failed steps (infrastructure faults; a retry redoes them)",
            attention["failed_steps"],
            ["vendor", "path", "step", "attempt", "pipeline_run_id", "detail"],
        )
