"""``sluice ingest``: land, register and gate a vendor's drop (or an ad-hoc folder) without Airflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from pipeline.cli._common import console, error_console, print_json, vendor_file_argument, warn


def command(
    path: str = typer.Argument(
        None,
        help="An ad-hoc folder (a local path or a URL such as s3://bucket/prefix) to ingest under a generic "
        "contract, or a vendor file (*.yaml).",
    ),
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
    """Ingest a vendor (`--vendor FILE`, or the file as PATH) or an ad-hoc folder (`PATH --kind mcap|video`)."""
    from pipeline.config import load_vendor
    from pipeline.enums import SourceKind
    from pipeline.steps.runner import EXECUTORS
    from pipeline.vendor_ingest import ingest_vendor

    if vendor_file is None and path is not None and vendor_file_argument(Path(path)):
        path, vendor_file = None, Path(path)
    if (vendor_file is None) == (path is None):
        raise typer.BadParameter("give either --vendor FILE or PATH --kind KIND")
    # every argument checked before the catalog is reached, so that a mistake is named as itself
    if executor not in EXECUTORS:
        raise typer.BadParameter(f"--executor must be one of {', '.join(EXECUTORS)}, not {executor!r}")
    if settle_s is not None and not settle_s >= 0:
        raise typer.BadParameter(f"--settle-s must be 0 or more seconds, not {settle_s}")
    if vendor_file is not None:
        vendor = load_vendor(vendor_file)
    else:
        kinds = [k.value for k in SourceKind]
        if kind not in kinds:
            given = "PATH needs --kind" if kind is None else f"--kind {kind!r} is not a kind;"
            raise typer.BadParameter(f"{given} one of {', '.join(kinds)}")
        vendor = _ad_hoc_vendor(kind, path)
        if include:
            vendor = vendor.model_copy(
                update={"source": vendor.source.model_copy(update={"include": tuple(include)})}
            )
    from pipeline.cli._common import context

    ctx = context()
    # Progress goes to stderr, so that stdout holds only the report (--json stays parseable).
    with error_console.status(f"ingesting {vendor.name}…"):
        report = ingest_vendor(
            vendor,
            ctx,
            executor=executor,
            settle_s=settle_s,
            gate=gate,
            on_step=lambda name, s: error_console.print(
                f"{name}: {s.succeeded} ok, {s.rejected} rejected, {s.skipped} already done, {s.failed} failed"
            ),
        )
    for warning in report.warnings:
        warn(warning)
    if as_json:
        print_json(report.as_dict())
        return
    console.print(
        f"[bold]{vendor.name}[/]: {report.discovered} files ({report.discovered_bytes / 1e6:.1f} MB) discovered",
        highlight=False,
    )
    if report.unselected:
        console.print(
            f"  {report.unselected} other file(s) left out by the include/exclude globs", highlight=False
        )
    for over in report.passed_over:
        console.print(f"  passed over {over['path']!r}: {over['why']} ({over['detail']})", highlight=False)
    if report.states:  # where they ended: the step counts above say nothing of duplicates
        console.print(
            "  now " + ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in report.states.items()),
            highlight=False,
        )
    if report.discovered:
        console.print("see them with `sluice files list` and `sluice quarantine list`")


def _ad_hoc_vendor(kind: str, where: str) -> Any:
    """The generic vendor of an ad-hoc folder: a local one must exist (said as a vendor's source is, before
    the catalog is reached); a URL is kept as given (``Path`` would fold ``s3://b`` into ``s3:/b``), and
    whether it can be listed is the discovery's to say, as for a vendor's source."""
    import fsspec
    from pydantic import ValidationError

    from pipeline.config import generic_vendor
    from pipeline.config.models import local_source_path
    from pipeline.discover import SourceMissingError

    try:
        vendor = generic_vendor(kind, where)  # the URL checked as a vendor's source is ("s3:/b", "s3://")
    except ValidationError as exc:
        raise typer.BadParameter(exc.errors()[0]["msg"].removeprefix("Value error, ")) from exc
    protocol, _ = fsspec.core.split_protocol(where)
    if protocol not in (None, "file", "local"):
        return vendor
    folder = local_source_path(where)
    if not folder.is_dir():
        raise SourceMissingError(str(folder.resolve()), is_file=folder.exists())
    return generic_vendor(kind, str(folder.resolve()))
