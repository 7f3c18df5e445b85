"""``sluice shard NAME@VERSION``: write, verify and record a dataset version's WebDataset shards."""

from __future__ import annotations

from typing import Any

import typer

from pipeline.cli._common import console, context, error_console, print_json, warn

#: The most ranks --world-size assigns shards to: past any training job, and small enough that the
#: assignment's per-rank lists fit in memory (10^11 ranks took the machine's memory and got killed).
MAX_WORLD_SIZE = 1 << 20


def command(
    dataset_version: str = typer.Argument(..., help="Dataset version as NAME@VERSION."),
    target_shard_bytes: str = typer.Option("256 MiB", "--target-shard-bytes", help="Target shard size."),
    world_size: int = typer.Option(
        0,
        "--world-size",
        min=0,
        max=MAX_WORLD_SIZE,
        help="Also assign each split's shards to this many ranks (a rank reads one split).",
    ),
    verify_only: bool = typer.Option(False, "--verify-only", help="Only verify the recorded shards."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Shard a dataset version from its manifest (staged, verified, renamed, then recorded)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pydantic import ValidationError
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import DatasetVersion, Manifest
    from pipeline.config import config_hash
    from pipeline.config.processing import ShardOptions
    from pipeline.errors import UnknownChoiceError
    from pipeline.manifest.errors import ManifestFetchError
    from pipeline.shard import assign_ranks, list_shards, verify_shards, write_shards
    from pipeline.shard.errors import NoShardsError

    name, sep, version = dataset_version.partition("@")
    if not sep or not name or not version:
        raise UnknownChoiceError("dataset version (NAME@VERSION)", dataset_version, ["NAME@VERSION"])
    try:
        # the step's own field: a size with its unit ("256 MiB", "1GB"), above zero
        target = int(
            ShardOptions.model_validate({"target_shard_bytes": target_shard_bytes}).target_shard_bytes
        )
    except ValidationError as exc:
        why = exc.errors()[0]["msg"]
        raise typer.BadParameter(f"--target-shard-bytes {target_shard_bytes!r}: {why}") from None
    ctx = context()
    with session_scope(make_session_factory(ctx.engine)) as session:
        row = session.execute(
            select(DatasetVersion.id).where(DatasetVersion.name == name, DatasetVersion.version == version)
        ).scalar_one_or_none()
        if row is None:
            raise UnknownChoiceError("dataset version", dataset_version, ["a recorded NAME@VERSION"])
        # .all(): dict() of a Result would take it for a mapping (it has keys()) and index it
        manifests = dict(
            session.execute(select(Manifest.format, Manifest.uri).where(Manifest.dataset_version_id == row))
            .tuples()
            .all()
        )
    if not verify_only:
        uri = manifests.get("parquet")
        if uri is None:
            raise UnknownChoiceError(
                "manifest of " + dataset_version, "none recorded", ["a parquet manifest"]
            )
        import fsspec

        try:
            with fsspec.open(uri, "rb") as fh:
                rows = pq.read_table(fh).to_pylist()
        except (OSError, pa.ArrowException) as exc:
            raise ManifestFetchError(
                f"cannot read the parquet manifest of {dataset_version} at {uri} ({exc}); "
                "`sluice scrub --kind manifest_parquet` checks what the store holds"
            ) from exc
        options = ShardOptions.model_validate({"target_shard_bytes": target})
        with error_console.status(f"writing shards of {len(rows)} manifest rows…"):
            write_shards(
                rows,
                target,
                ctx.store,
                name,
                version,
                engine=ctx.engine,
                config_hash=config_hash(options),
                code_version=ctx.code_version,
                dataset_version_id=row,
            )
    records = list_shards(ctx.engine, row)
    if not records:  # --verify-only of a version never sharded: nothing to verify is not a pass
        raise NoShardsError(dataset_version)
    checks = verify_shards(ctx.store, records)
    shards: list[dict[str, Any]] = [
        {
            "uri": r.uri,
            "split": r.split,
            "index": r.shard_index,
            "samples": r.n_samples,
            "size_bytes": r.size_bytes,
            "ok": c.ok,
            "problems": c.problems,
        }
        for r, c in zip(records, checks, strict=True)
    ]
    result: dict[str, object] = {"dataset_version": dataset_version, "shards": shards}
    imbalance: dict[str, float] = {}
    if world_size:
        # Per split: a rank that trains reads train shards only, one that evaluates val shards only.
        ranks: dict[str, list[list[str]]] = {}
        idle: dict[str, list[int]] = {}
        for split in sorted({r.split or "" for r in records}):
            assignment = assign_ranks(
                [(r.uri, r.size_bytes) for r in records if (r.split or "") == split], world_size
            )
            ranks[split] = [list(r) for r in assignment.ranks]
            imbalance[split] = assignment.imbalance
            if assignment.idle_ranks:
                idle[split] = assignment.idle_ranks
        result["ranks"] = ranks
        result["imbalance"] = imbalance
        result["ranks_without_shards"] = idle
        for split, none in idle.items():
            shown = ", ".join(map(str, none[:8])) + (", …" if len(none) > 8 else "")
            warn(
                f"{split or 'no split'}: {sum(map(len, ranks[split]))} shard(s) for {world_size} ranks, so "
                f"{len(none)} rank(s) get none ({shown}): a distributed job waits on a rank with nothing to "
                "read; write smaller shards (--target-shard-bytes) or give this split fewer ranks"
            )
    if as_json:
        print_json(result)
    else:
        bad = [s for s in shards if not s["ok"]]
        console.print(
            f"{len(records)} shard(s) recorded for {dataset_version}, {len(bad)} failed verification"
        )
        for s in bad:
            console.print(f"[red]{s['uri']}[/]: {'; '.join(s['problems'])}", highlight=False)
        for split, value in imbalance.items():
            console.print(f"{split or 'no split'}: {world_size} ranks, imbalance {value:.4f}")
    if any(not c.ok for c in checks):
        raise typer.Exit(1)
