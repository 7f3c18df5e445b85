"""``sluice lineage ID``: from a manifest row, shard, artifact, episode or raw file back to the raw bytes,
with the steps, config hashes and code versions that made each link.

Ids: ``blob:<sha256>`` (or a bare sha256), ``file:<vendor>/<path>``, ``episode:<id>``, ``artifact:<id or
uri>``, ``shard:<id>`` or ``shard:<dataset>@<version>:<split>:<index>``, ``manifest:<dataset>@<version>``
and ``manifest:<dataset>@<version>:<row>`` (row numbers start at 0).
"""

from __future__ import annotations

from typing import Any

import typer

from pipeline.cli._common import console, print_json, print_table


def command(
    ref: str = typer.Argument(
        ...,
        help="blob:<sha256>, file:<vendor>/<path>, episode:<id>, artifact:<id|uri>, shard:<id>, "
        "manifest:<dataset>@<version>[:<row>]",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Trace any id back to its raw file (read-only)."""
    from pipeline.settings import load_settings
    from pipeline.ui.lineage import trace
    from pipeline.ui.source import view_sources

    sources = view_sources(load_settings())
    with sources.session() as session:
        lineage = trace(session, ref, storage_options=sources.storage_options)
    if as_json:
        print_json(lineage.as_dict())
        return
    _print(lineage)


def _value(key: str, value: Any) -> str:
    from pipeline.ui.render import format_fact

    return format_fact(value, key)


def _print(lineage: Any) -> None:
    from rich.tree import Tree

    tree = Tree(f"[bold]{lineage.ref}[/]")
    branch = tree
    for node in lineage.chain:
        facts = ", ".join(f"{k}={_value(k, v)}" for k, v in node.fields.items() if v not in (None, ""))
        branch = branch.add(f"[bold]{node.kind}[/] {node.ref}\n[dim]{facts}[/]")
    console.print(tree, highlight=False)
    for note in lineage.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    if lineage.inputs:
        print_table(
            f"made from ({len(lineage.inputs)} shown)",
            [{"ref": n.ref, "uri": n.fields.get("uri")} for n in lineage.inputs],
            ["ref", "uri"],
        )
    if lineage.steps:
        print_table(
            "steps",
            [s.__dict__ | {"run": f"{s.dag_id}/{s.run_id}" if s.dag_id else ""} for s in lineage.steps],
            ["step", "status", "config_hash", "attempt", "run", "reason", "detail"],
        )
    if lineage.artifacts:
        print_table(
            "artifacts", lineage.artifacts, ["id", "kind", "step", "config_hash", "code_version", "uri"]
        )
    if lineage.datasets:
        print_table("in dataset versions", lineage.datasets, ["dataset", "split"])
    if lineage.raw:
        raw = lineage.raw
        console.print(
            f"\n[bold]raw file[/] {raw['sha256']} ({raw['size_bytes']} bytes) at {raw['raw_uri']}",
            highlight=False,
        )
        print_table(
            "delivered as", raw["aliases"], ["vendor", "path", "first_seen_at", "episode_id", "state"]
        )
    if lineage.outputs:
        print_table(
            "made from this raw file",
            [n.fields | {"ref": n.ref} for n in lineage.outputs],
            ["ref", "kind", "step", "config_hash", "code_version"],
        )
