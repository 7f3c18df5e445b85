"""``sluice vendor``: validate, show and describe vendor configuration files.

``validate`` exits 1 if any file is invalid (printing every problem with its key path), ``show`` prints the
resolved config (defaults filled in) as JSON, ``hash`` the config hash and per-step hashes, and ``schema``
the JSON schema of a vendor file (used by the docs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from pipeline.config import VendorConfig

app = typer.Typer(no_args_is_help=True, help="Vendor configuration files: validate, show, hash, schema.")

BaseDir = Annotated[
    Path | None,
    typer.Option(
        "--base-dir", help="Project root that relative source paths resolve against (default: cwd)."
    ),
]
VendorFile = Annotated[Path, typer.Argument(help="A vendor YAML file.")]


def _expand(paths: list[Path]) -> list[Path]:
    from pipeline.config.loader import VENDOR_SUFFIXES

    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(
                p for p in path.iterdir() if p.suffix in VENDOR_SUFFIXES and not p.name.startswith(".")
            )
        else:
            files.append(path)
    return files


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Vendor YAML files, or folders of them.")],
    base_dir: BaseDir = None,
) -> None:
    """Validate vendor files: every problem with its key path; exit 1 if any file is invalid."""
    import difflib

    from rich.console import Console
    from rich.text import Text

    from pipeline.annotate.registry import annotator_names
    from pipeline.config import config_hash, load_vendor
    from pipeline.errors import ConfigError
    from pipeline.orchestrate.toggles import validate_conf

    console = Console(soft_wrap=True, highlight=False)
    targets = _expand(files)
    if not targets:
        console.print(Text("no vendor files found", style="yellow"))
        raise typer.Exit(1)
    bad = warned = 0
    for path in targets:
        try:
            vendor = load_vendor(path, base_dir=base_dir)
        except ConfigError as exc:
            bad += 1
            console.print(
                Text.assemble(("invalid ", "bold red"), str(path), f": {len(exc.problems)} problem(s)")
            )
            for key_path, message in exc.problems:
                console.print(Text.assemble("  ", (key_path or "<root>", "cyan"), "  ", message))
            continue
        console.print(
            Text.assemble(
                ("ok ", "bold green"),
                (vendor.name, "bold"),
                f" ({vendor.kind.value}) {path}  config sha256 ",
                (config_hash(vendor), "dim"),
            )
        )
        warnings = []
        problem = local_source_problem(vendor, base_dir)
        if problem:
            warnings.append(("source.url", problem))
        try:  # the rule a run applies to its toggles, here with none given: the vendor's own defaults
            validate_conf(vendor, None)
        except ConfigError as refused:
            warnings += [("steps", why) for _, why in refused.problems]
        known = annotator_names()
        enabled = {name for name, config in vendor.annotate.annotators.items() if config.enabled}
        for name in sorted(enabled - set(known)):
            near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]!r}? " if near else ""
            warnings.append(
                (
                    f"annotate.annotators.{name}",
                    f"not a registered annotator ({hint}registered: {', '.join(known)}); the annotate step "
                    "fails on it unless the deployment registers it (pipeline.annotate.register_annotator)",
                )
            )
        warned += bool(warnings)
        for key_path, message in warnings:
            console.print(Text.assemble("  ", ("warning ", "bold yellow"), (key_path, "cyan"), "  ", message))
    if warned:
        console.print(
            Text(
                f"{warned} vendor file(s) valid but with warnings: a run would fail, find nothing or fail a step",
                style="yellow",
            )
        )
    if bad:
        console.print(Text(f"{bad} of {len(targets)} vendor file(s) invalid", style="bold red"))
        raise typer.Exit(1)


def local_source_problem(vendor: VendorConfig, base_dir: Path | None) -> str | None:
    """Why the vendor's local source folder cannot be discovered now (None when it can, or when the
    source is remote: a bucket is checked by the run, with its credentials, not here).

    A warning rather than an error: the folder may exist only on the workers (a mount), or be created by
    the vendor's first delivery. But a typo must not pass silently: a run would fail with source_missing.
    """
    from pipeline.config.models import local_source_path

    if not vendor.source.is_local:
        return None
    root = local_source_path(vendor.source.url, base_dir).absolute()
    if not root.exists():
        return f"{root} does not exist here: a run on this machine would fail with source_missing"
    if not root.is_dir():
        return f"{root} is not a folder: a run on this machine would fail with source_missing"
    from pipeline.errors import SluiceError
    from pipeline.vendor_ingest import discover_vendor

    try:  # what a run would find there now (a folder of one drop is listed in moments)
        empty = discover_vendor(vendor, base_dir or Path.cwd()).emptiness(str(root))
    except (OSError, SluiceError) as exc:
        return f"{root} cannot be listed: {exc}"
    return f"{empty[1]}: a run now would have nothing to do" if empty is not None else None


def _load_or_exit(file: Path, base_dir: Path | None) -> VendorConfig:
    from rich.console import Console
    from rich.text import Text

    from pipeline.config import load_vendor
    from pipeline.errors import ConfigError

    try:
        return load_vendor(file, base_dir=base_dir)
    except ConfigError as exc:
        console = Console(stderr=True, soft_wrap=True, highlight=False)
        console.print(Text.assemble(("invalid ", "bold red"), str(file)))
        for key_path, message in exc.problems:
            console.print(Text.assemble("  ", (key_path or "<root>", "cyan"), "  ", message))
        raise typer.Exit(1) from None


@app.command()
def show(
    file: VendorFile,
    base_dir: BaseDir = None,
) -> None:
    """Print the resolved config (every default filled in) as JSON."""
    vendor = _load_or_exit(file, base_dir)
    typer.echo(json.dumps(vendor.model_dump(mode="json"), indent=2, ensure_ascii=False))


@app.command("hash")
def hash_(
    file: VendorFile,
    base_dir: BaseDir = None,
) -> None:
    """Print the config hash and each step's config hash (what outputs store) as JSON."""
    from pipeline.config import STEP_READS, config_hash, step_config_hashes

    vendor = _load_or_exit(file, base_dir)
    result = {
        "vendor": vendor.name,
        "config_hash": config_hash(vendor),
        "steps": {
            step.value: {"config_hash": digest, "reads": list(STEP_READS[step])}
            for step, digest in step_config_hashes(vendor).items()
        },
    }
    typer.echo(json.dumps(result, indent=2))


@app.command()
def schema() -> None:
    """Print the JSON schema of a vendor file."""
    from pipeline.config import VendorConfig

    typer.echo(json.dumps(VendorConfig.model_json_schema(), indent=2, ensure_ascii=False))


@app.command()
def init(
    name: Annotated[str, typer.Argument(help="The vendor's slug (also the file's name).")],
    sample: Annotated[Path, typer.Option("--from", help="A sample robot log (MCAP) of the vendor.")],
    source: Annotated[
        str, typer.Option("--source", help="Where the vendor's drops live (fsspec URL or path).")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="The vendor file to write (default: dags/vendors/NAME.yaml).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state", help="A topic to read as state, where its name and type do not say (repeatable)."
        ),
    ] = None,
    actions: Annotated[
        list[str] | None,
        typer.Option(
            "--actions", help="A topic to read as actions, where its name and type do not say (repeatable)."
        ),
    ] = None,
) -> None:
    """Propose a vendor file from a sample log: cameras, state and actions from its schemas and topic names,
    measured rates, stamp fields, encodings and compressions, a comment on each guess; it always validates.
    A topic of a vendor's own type whose name says neither is listed as ignored, unless named with
    `--state` or `--actions`."""
    from rich.console import Console

    from pipeline.config.propose import write_proposal

    target = out or Path("dags") / "vendors" / f"{name}.yaml"
    if target.stem != name:
        raise typer.BadParameter(f"the file's name must be the vendor's: {name}.yaml, not {target.name}")
    if target.is_dir():
        raise typer.BadParameter(f"--out {target} is a directory; allowed: a file's path")
    if target.exists() and not force:
        raise typer.BadParameter(f"{target} exists; pass --force to overwrite it")
    if not sample.is_file():
        raise typer.BadParameter(f"sample {sample} is not a file")
    both = sorted(set(state or ()) & set(actions or ()))
    if both:
        raise typer.BadParameter(f"{', '.join(both)}: named both --state and --actions")
    roles = dict.fromkeys(state or (), "state") | dict.fromkeys(actions or (), "actions")
    summary = write_proposal(name, sample, source, target, roles=roles)
    console = Console(highlight=False)
    console.print(f"[green]wrote[/] {target} (validates; read its comments, then `sluice run` it)")
    for role, topics in summary.items():
        console.print(f"  {role}: {', '.join(topics) if topics else '-'}")
