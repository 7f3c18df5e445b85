"""Lineage ids: ``<kind>:<value>``, one kind per thing the pipeline records.

================================= ====================================================================
``blob:<sha256>``                 a raw file by content (a bare 64-hex sha256 works too)
``file:<vendor>/<path>``          a raw file by the vendor path it was delivered under
``episode:<id>``                  an episode (one per source file)
``artifact:<id>``                 a derived object by catalog id; ``artifact:<uri>`` by its store URI
``shard:<id>``                    a shard by catalog id; ``shard:<dataset>@<version>:<split>:<index>``
``manifest:<dataset>@<version>``  a dataset version's manifest; ``...:<row>`` one row of it (0-based)
================================= ====================================================================

Also here: reading one row of a manifest file (the only part of a lineage not read from the catalog).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pipeline.errors import SluiceError, StoreError

_SHA256 = re.compile(r"[0-9a-f]{64}")
#: ``<dataset>@<version>``, as dataset versions are named everywhere (``sluice dataset show pick@v3``).
VERSIONED = re.compile(r"(?P<name>[^@:]+)@(?P<version>[^:]+)")

REF_KINDS = ("blob", "file", "episode", "artifact", "shard", "manifest")
REF_SYNTAX = (
    "blob:<sha256>, file:<vendor>/<path>, episode:<id>, artifact:<id or uri>, shard:<id>, "
    "shard:<dataset>@<version>:<split>:<index>, manifest:<dataset>@<version>[:<row>]"
)


class LineageRefError(SluiceError, ValueError):
    """An id that :func:`parse_ref` cannot read."""

    def __init__(self, ref: str, problem: str) -> None:
        self.ref = ref
        super().__init__(f"cannot read lineage id {ref!r}: {problem}; allowed forms: {REF_SYNTAX}")


class LineageNotFoundError(SluiceError, LookupError):
    """A well-formed id that names nothing in the catalog."""

    def __init__(self, ref: str, detail: str = "") -> None:
        self.ref = ref
        super().__init__(f"{ref} is not in the catalog" + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class Ref:
    kind: str
    value: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"


def parse_ref(ref: str) -> Ref:
    """Read an id in the syntax of this module's table (:class:`LineageRefError` otherwise)."""
    ref = ref.strip()
    if _SHA256.fullmatch(ref):
        return Ref("blob", ref)
    kind, sep, value = ref.partition(":")
    if not sep or not value:
        raise LineageRefError(ref, "expected <kind>:<value>")
    if kind not in REF_KINDS:
        raise LineageRefError(ref, f"unknown kind {kind!r}")
    if kind == "blob" and not _SHA256.fullmatch(value):
        raise LineageRefError(ref, "a blob is named by its sha256 (64 lower-case hex digits)")
    if kind == "episode" and not value.isdigit():
        raise LineageRefError(ref, "an episode is named by its numeric id")
    if kind == "file" and "/" not in value:
        raise LineageRefError(ref, "a file is named <vendor>/<path>")
    if kind == "shard" and not value.isdigit():
        parts = value.split(":")
        if len(parts) != 3 or not VERSIONED.fullmatch(parts[0]) or not parts[2].isdigit():
            raise LineageRefError(ref, "a shard is named by its id or <dataset>@<version>:<split>:<index>")
    if kind == "manifest":
        name_version, _, row = value.partition(":")
        if not VERSIONED.fullmatch(name_version) or (row and not row.isdigit()):
            raise LineageRefError(
                ref, "a manifest is named <dataset>@<version>, a row <dataset>@<version>:<row>"
            )
    return Ref(kind, value)


def read_manifest_row(uri: str, row: int, *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row of the Arrow IPC manifest at ``uri`` as a dict, reading only the record batch that holds it.

    The writer records its batch size in the schema, so the batch is found by arithmetic; a file without it
    is scanned batch by batch.
    """
    import fsspec
    import pyarrow as pa

    from pipeline.manifest.format import IPC_BATCH_ROWS_KEY

    try:
        with fsspec.open(uri, "rb", **(storage_options or {})) as handle:
            reader = pa.ipc.open_file(handle)
            declared = (reader.schema.metadata or {}).get(IPC_BATCH_ROWS_KEY)
            if declared and int(declared) > 0:
                index = row // int(declared)
                if index < reader.num_record_batches:
                    batch = reader.get_batch(index)
                    within = row - index * int(declared)
                    if within < batch.num_rows:
                        return dict(batch.slice(within, 1).to_pylist()[0])
            offset = 0
            for index in range(reader.num_record_batches):
                batch = reader.get_batch(index)
                if row < offset + batch.num_rows:
                    return dict(batch.slice(row - offset, 1).to_pylist()[0])
                offset += batch.num_rows
    except (OSError, pa.ArrowInvalid) as exc:
        raise StoreError(f"cannot read row {row} of the manifest {uri}: {exc}") from exc
    raise StoreError(f"the manifest {uri} has {offset} rows; row {row} does not exist")
