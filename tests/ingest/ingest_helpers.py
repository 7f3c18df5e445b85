"""Helpers for the ingest tests: catalog contexts, vendor configs, and bad inputs made from good ones.

Robot-log damage comes in two kinds: *rewrites* (read a clean episode with the stock ``mcap`` reader and
write it again with the stock writer, changing one thing: layout, CRCs, a schema, metadata, some messages)
and *byte patches* at places found by :mod:`pipeline.synth.mutate`'s record walker. Videos are encoded
with PyAV (real H.264), with the frame index drawn into the pixels where the synth layer does it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml
from mcap.reader import make_reader
from mcap.writer import CompressionType, IndexType, Writer

from pipeline.catalog import make_engine
from pipeline.config import VendorConfig, load_vendor
from pipeline.enums import FileState, ReasonCode
from pipeline.settings import Settings
from pipeline.steps.base import StepContext
from pipeline.store import Store

REPO = Path(__file__).resolve().parents[2]
ACME = REPO / "dags" / "vendors" / "acme_robotics.yaml"
COMPRESSIONS = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}


@dataclass(frozen=True)
class Expected:
    """What a correct ingest makes of one input."""

    state: FileState
    reasons: frozenset[ReasonCode] = frozenset()
    duplicate_of: str | None = None

    @classmethod
    def of(cls, state: FileState, *reasons: ReasonCode, duplicate_of: str | None = None) -> Expected:
        return cls(state, frozenset(reasons), duplicate_of)


def make_context(base: Path, url: str) -> StepContext:
    """Clients for one test: the given database, a store under ``base``."""
    return StepContext(
        settings=Settings(home=base / "home", database_url=url, project_dir=base),
        engine=make_engine(url),
        store=Store(base / "store"),
        code_version="test",
    )


def vendor_config(base: Mapping[str, Any] | Path, root: Path, **overrides: Any) -> VendorConfig:
    """A vendor config read from YAML (or a dict) whose source is ``root``, files ready at once.

    ``overrides`` replace whole top-level sections; ``source`` entries are merged into the source.
    The config goes through the real loader (a YAML file named after the vendor).
    """
    data = yaml.safe_load(base.read_text()) if isinstance(base, Path) else json.loads(json.dumps(base))
    source = {**data.get("source", {}), "url": str(root), "settle_s": 0, **overrides.pop("source", {})}
    data = {**data, **overrides, "source": source}
    folder = root.parent / f"vendor-{data['name']}-{hashlib.sha1(repr(data).encode()).hexdigest()[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_vendor(path)


def episode_rows(engine: sa.Engine, vendor: str | None = None) -> dict[str, dict[str, Any]]:
    """alias -> {state, reasons, detail, duplicate_of (alias), id, sha256, version} for every source file
    version; the alias is the path, then ``[version N]`` past the first (as ingest names them)."""
    query = sa.text(
        """
        SELECT sf.path || CASE WHEN sf.version > 1 THEN ' [version ' || sf.version || ']' ELSE '' END
                   AS path,
               sf.version, e.id, e.state, e.reasons, e.detail, b.sha256,
               d_sf.path || CASE WHEN d_sf.version > 1 THEN ' [version ' || d_sf.version || ']' ELSE '' END
                   AS duplicate_of
        FROM episodes e
        JOIN source_files sf ON sf.id = e.source_file_id
        JOIN vendors v ON v.id = sf.vendor_id
        JOIN blobs b ON b.id = e.blob_id
        LEFT JOIN episodes d ON d.id = e.duplicate_of_id
        LEFT JOIN source_files d_sf ON d_sf.id = d.source_file_id
        WHERE (CAST(:vendor AS text) IS NULL OR v.name = :vendor)
        """
    )
    with engine.connect() as conn:
        rows = conn.execute(query, {"vendor": vendor}).mappings().all()
    return {r["path"]: dict(r) for r in rows}


def table_counts(engine: sa.Engine) -> dict[str, int]:
    """Row counts of every table ingest and the pre-gate write."""
    tables = ("vendors", "blobs", "source_files", "episodes", "streams", "check_results", "step_runs")
    with engine.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in tables}


def blobs(engine: sa.Engine) -> list[tuple[str, int]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text("SELECT sha256, size_bytes FROM blobs"))]  # type: ignore[misc]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """relative path -> (sha256, mtime_ns) of every regular file under ``root`` (symlinks not followed)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[path.relative_to(root).as_posix()] = (sha256_of(path), path.stat().st_mtime_ns)
    return out


# -- MCAP rewrites -----------------------------------------------------------------------------------------

#: A message on its way through a rewrite: (topic, log_time_ns, payload) -> the same, or None to drop it.
MessageFn = Callable[[str, int, bytes], tuple[int, bytes] | None]


def rewrite(
    src: Path,
    dst: Path,
    *,
    shift_ns: int = 0,
    chunk_size: int = 1 << 20,
    compression: str = "zstd",
    chunked: bool = True,
    crcs: bool = True,
    data_crcs: bool = False,
    schemas: Mapping[str, bytes] | None = None,
    encodings: Mapping[str, str] | None = None,
    metadata: Mapping[str, Mapping[str, str]] | None = None,
    message_fn: MessageFn | None = None,
) -> Path:
    """Write ``src``'s messages again with the stock writer, changing what the keywords say.

    ``shift_ns`` moves every log and publish time (so the copy is not a near-duplicate of ``src``);
    ``schemas``: schema name -> new schema data; ``encodings``: topic -> new message encoding;
    ``metadata``: replaces the metadata records (``{}`` drops them all).
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        reader = make_reader(fin)
        header = reader.get_header()
        writer = Writer(
            fout,
            chunk_size=chunk_size,
            compression=COMPRESSIONS[compression],
            index_types=IndexType.ALL,
            use_chunking=chunked,
            enable_crcs=crcs,
            enable_data_crcs=data_crcs,
        )
        writer.start(profile=header.profile, library=header.library)
        records = list(reader.iter_metadata())
        schema_ids: dict[int, int] = {}
        channel_ids: dict[int, int] = {}
        for schema, channel, message in reader.iter_messages(log_time_order=False):
            if schema is not None and schema.id not in schema_ids:
                data = (schemas or {}).get(schema.name, schema.data)
                schema_ids[schema.id] = writer.register_schema(schema.name, schema.encoding, data)
            if channel.id not in channel_ids:
                encoding = (encodings or {}).get(channel.topic, channel.message_encoding)
                channel_ids[channel.id] = writer.register_channel(
                    channel.topic, encoding, schema_ids.get(channel.schema_id, 0), dict(channel.metadata)
                )
            log_time, data = message.log_time, message.data
            if message_fn is not None:
                changed = message_fn(channel.topic, log_time, data)
                if changed is None:
                    continue
                log_time, data = changed
            writer.add_message(
                channel_ids[channel.id],
                log_time=log_time + shift_ns,
                publish_time=log_time + shift_ns,
                data=data,
                sequence=message.sequence,
            )
        if metadata is None:
            for record in records:
                writer.add_metadata(record.name, dict(record.metadata))
        else:
            for name, values in metadata.items():
                writer.add_metadata(name, dict(values))
        writer.finish()
    return dst


def patch(path: Path, offset: int, new: bytes) -> None:
    """Overwrite bytes of ``path`` at ``offset`` in place."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(new)


def copy_bytes(src: Path, dst: Path, data: bytes | None = None) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes() if data is None else data)
    return dst


def json_stamp_shift(topic: str, delta_ns: int) -> MessageFn:
    """Move the hardware stamp (``stamp_ns``) inside the JSON payloads of ``topic`` by ``delta_ns``."""

    def shift(t: str, log_time: int, data: bytes) -> tuple[int, bytes] | None:
        if t != topic:
            return log_time, data
        body = json.loads(data)
        body["stamp_ns"] += delta_ns
        return log_time, json.dumps(body, separators=(",", ":")).encode()

    return shift


def repeat_log_times(topic: str, every: int) -> MessageFn:
    """Give every ``every``-th message of ``topic`` the log time of the message before it."""
    state = {"n": 0, "last": None}

    def repeat(t: str, log_time: int, data: bytes) -> tuple[int, bytes] | None:
        if t != topic:
            return log_time, data
        state["n"] += 1
        out = log_time
        if state["n"] % every == 0 and state["last"] is not None:
            out = state["last"]
        state["last"] = log_time
        return out, data

    return repeat


def keep_until(limit_ns: int) -> MessageFn:
    """Drop every message logged at or after ``limit_ns``."""

    def keep(t: str, log_time: int, data: bytes) -> tuple[int, bytes] | None:
        return (log_time, data) if log_time < limit_ns else None

    return keep


def first_log_time(path: Path) -> int:
    with open(path, "rb") as fh:
        stats = make_reader(fh).get_summary().statistics  # type: ignore[union-attr]
    return int(stats.message_start_time)


def copy_drop(src: Path, dst: Path) -> Path:
    """A writable copy of a drop folder."""
    shutil.copytree(src, dst)
    for path in dst.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return dst
