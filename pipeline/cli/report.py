"""``sluice report RUN``: one self-contained HTML file about a pipeline run, with its plots (opens offline)."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli._common import console, error_console

#: Where reports go by default, under SLUICE_HOME (not the working directory, which may be the clone).
REPORTS_FOLDER = "reports"


def command(
    run: str = typer.Argument(..., help="Run id, Airflow run_id, dag_id/run_id, or 'latest'."),
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="HTML file to write (default: $SLUICE_HOME/reports/sluice-run-ID.html, ID the run's).",
    ),
    bench: list[Path] = typer.Option(
        [], "--bench", help="A `sluice bench --json` result to include (repeatable)."
    ),
) -> None:
    """Write an HTML report of one run: outcome, toggles, failures, quarantines, quality plots."""
    from pipeline.report.html import resolve_run, write_report
    from pipeline.settings import load_settings
    from pipeline.ui.source import view_sources

    settings = load_settings()
    sources = view_sources(settings)
    with error_console.status("gathering the run and drawing its plots…"):
        target = out or settings.home_abs / REPORTS_FOLDER / f"sluice-run-{resolve_run(sources, run).id}.html"
        path = write_report(sources, run, target, bench_files=bench)
    console.print(f"report written to {path} ({path.stat().st_size / 1e3:.0f} kB)", highlight=False)
