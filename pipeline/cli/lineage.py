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
        # code spans: the help is markdown, where a bare <sha256> is an HTML tag and vanishes
        help="`blob:<sha256>`, `file:<vendor>/<path>`, `episode:<id>`, `artifact:<id|uri>`, `shard:<id>`, "
        "`manifest:<dataset>@<version>[:<row>]`",
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


def _facts(node: Any) -> str:
    return ", ".join(f"{k}={_value(k, v)}" for k, v in node.fields.items() if v not in (None, ""))


def _value(key: str, value: Any) -> str:
    from pipeline.ui.render import format_fact

    return format_fact(value, key)


def _print(lineage: Any) -> None:
    from rich.text import Text
    from rich.tree import Tree

    # refs, paths and details come from vendors: printed as text, never read as markup
    if console.is_terminal:
        tree = Tree(Text(lineage.ref, style="bold"))
        branch = tree
        for node in lineage.chain:
            branch = branch.add(Text.assemble((node.kind, "bold"), f" {node.ref}\n", (_facts(node), "dim")))
        console.print(tree, highlight=False)
    else:  # piped: one link per line pair, nothing cut at a width
        console.print(lineage.ref, markup=False, highlight=False, soft_wrap=True)
        for depth, node in enumerate(lineage.chain, start=1):
            pad = "  " * depth
            console.print(f"{pad}{node.kind} {node.ref}", markup=False, highlight=False, soft_wrap=True)
            console.print(f"{pad}  {_facts(node)}", markup=False, highlight=False, soft_wrap=True)
    for note in lineage.notes:
        console.print(Text.assemble(("note: ", "yellow"), note), highlight=False)
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
            Text.assemble(
                "\n",
                ("raw file", "bold"),
                f" {raw['sha256']} ({raw['size_bytes']} bytes) at {raw['raw_uri']}",
            ),
            highlight=False,
            soft_wrap=True,
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
