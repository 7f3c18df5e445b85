"""``sluice scrub``: re-hash every stored object the catalog records a sha256 for; report what changed."""

from __future__ import annotations

from collections import Counter

import typer

from pipeline.cli._common import console, context, error_console, print_json, warn


def command(
    as_json: bool = typer.Option(False, "--json", help="Print findings as JSON."),
    kinds: list[str] = typer.Option(
        [],
        "--kind",
        help="Only objects of this kind (raw, transcoded_episode, clip, annotation, shard, manifest, "
        "manifest_parquet, export); repeat for several. Default: every kind.",
    ),
) -> None:
    """Re-hash raw objects, derived episodes, clips, shards and manifests against the catalog; exit 1 if
    any is missing or changed."""
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.queries import STORED_OBJECT_KINDS, stored_objects
    from pipeline.errors import UnknownChoiceError

    for kind in kinds:  # a misspelt kind would check nothing and pass
        if kind not in STORED_OBJECT_KINDS:
            raise UnknownChoiceError("--kind", kind, STORED_OBJECT_KINDS)
    ctx = context()
    with session_scope(make_session_factory(ctx.engine)) as session:
        objects = stored_objects(session, ctx.store)
    if kinds:
        objects = [o for o in objects if o.kind in kinds]
    by_kind = Counter(o.kind for o in objects)
    for kind in sorted(set(kinds) - set(by_kind)):
        warn(f"the catalog records no stored object of kind {kind}: none was checked")
    if not objects and not kinds:
        warn("the catalog records no stored object yet: nothing was checked")
    with error_console.status(f"re-hashing {len(objects)} objects…"):
        findings = [f.__dict__ for f in ctx.store.scrub(objects)]
    if as_json:
        print_json({"objects": len(objects), "by_kind": dict(by_kind), "findings": findings})
    else:
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(by_kind.items()))
        console.print(f"{len(objects)} objects checked ({counts}), {len(findings)} problem(s)")
        for f in findings:
            console.print(
                f"[red]{f['problem']}[/] {f['kind']} {f['sha256']} {f['uri']}: {f['detail']}", highlight=False
            )
    if findings:
        raise typer.Exit(1)
