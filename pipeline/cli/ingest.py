"""``sluice ingest``: land, register and gate a vendor's drop (or an ad-hoc folder) without Airflow."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli._common import console, print_json, progress


def command(
    path: Path = typer.Argument(None, help="An ad-hoc folder to ingest under a generic contract."),
    vendor_file: Path = typer.Option(None, "--vendor", help="A vendor config file (dags/vendors/*.yaml)."),
    kind: str = typer.Option(None, "--kind", help="mcap or video (with PATH)."),
    include: list[str] = typer.Option(
        None, "--include", help="With PATH: only files matching this glob (repeatable); default every file."
    ),
    settle_s: float = typer.Option(None, "--settle-s", help="Override the vendor's settle time."),
    executor: str = typer.Option(
        "local", help="local (this process and its workers) or ray (the cluster at SLUICE_RAY_ADDRESS)"
    ),
    gate: bool = typer.Option(True, help="Run the quality pre-gate after landing."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Ingest a vendor (``--vendor FILE``) or an ad-hoc folder (``PATH --kind mcap|video``)."""
    from pipeline.config import generic_vendor, load_vendor
    from pipeline.vendor_ingest import ingest_vendor

    if (vendor_file is None) == (path is None):
        raise typer.BadParameter("give either --vendor FILE or PATH --kind KIND")
    if vendor_file is not None:
        vendor = load_vendor(vendor_file)
    else:
        if kind is None:
            raise typer.BadParameter("PATH needs --kind mcap|video")
        vendor = generic_vendor(kind, str(path.resolve()))
        if include:
            vendor = vendor.model_copy(
                update={"source": vendor.source.model_copy(update={"include": tuple(include)})}
            )
    from pipeline.cli._common import context

    ctx = context()
    with progress.status(f"ingesting {vendor.name}…"):
        report = ingest_vendor(
            vendor,
            ctx,
            executor=executor,
            settle_s=settle_s,
            gate=gate,
            on_step=lambda name, s: progress.log(
                f"{name}: {s.succeeded} ok, {s.rejected} rejected, {s.skipped} already done, {s.failed} failed"
            ),
        )
    if as_json:
        print_json(report.as_dict())
        return
    console.print(
        f"[bold]{vendor.name}[/]: {report.discovered} files ({report.discovered_bytes / 1e6:.1f} MB) discovered"
    )
    for over in report.passed_over:
        console.print(f"  passed over {over['path']!r}: {over['why']} ({over['detail']})")
    console.print("see them with `sluice files list` and `sluice quarantine list`")
