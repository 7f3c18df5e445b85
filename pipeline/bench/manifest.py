"""``sluice bench manifest``: per-rank memory and time to first batch, memory-mapped vs reading Parquet.

A generated manifest (10M rows by default) is written once with :func:`write_manifest` and kept under
``<home>/bench/manifest/`` for later runs. The node cache is emptied and one process downloads the IPC file
into it; then, for each of 8 ranks, three fresh subprocesses run one after another on the same files:

* ``mmap``: :func:`open_manifest` with memory mapping and shard-on-load (the product path);
* ``read_all``: the whole Parquet file read, then sliced to the rank's rows (the reference);
* ``row_groups``: only the Parquet row groups that hold the rank's rows, then sliced (reported beside).

Each subprocess imports everything any mode needs (``pq.read_table`` alone would otherwise spend about a
second importing ``pyarrow.dataset`` and pandas inside the timed region), then records /proc/self/status
(its baseline), and again once it holds its slice and has read the first batch's values. Private resident
memory is RssAnon (mapped file pages are shared page cache), reported with VmRSS and VmHWM beside it; all
three as growth over the baseline. The headline figures compare medians over the ranks. One rank is then
repeated with the files evicted from the page cache (``posix_fadvise(DONTNEED)``) to show the cold case.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fsspec.implementations.local  # noqa: F401  (the loader's first call would import it)
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset  # imported up front: see the module docstring
import pyarrow.parquet as pq

import pipeline
from pipeline.enums import Split
from pipeline.errors import UnknownChoiceError
from pipeline.manifest import format as mf
from pipeline.manifest.loader import open_manifest, shard_range
from pipeline.settings import Settings

log = logging.getLogger(__name__)

SIZES = {"default": 10_000_000, "small": 1_000_000, "tiny": 20_000}
WORLD_SIZE = 8
#: Rows in the first batch a rank asks for: a typical sampler batch of episodes.
BATCH_ROWS = 1024
#: The rank repeated with a cold page cache (MEASURED.md quotes rank 3 of 8).
COLD_RANK = 3
#: Bump when the generated data changes, so an old cache folder is not reused.
GENERATOR_VERSION = 1
MODES = ("mmap", "read_all", "row_groups")
#: Rows per generated Arrow chunk: keeps each string chunk's int32 offsets far from 2 GiB.
_GEN_CHUNK_ROWS = 1 << 20
_VENDORS = ("acme_robotics", "bluefield", "cobalt_labs", "delta_motion", "eastgate", "fernhill")
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_CHILD_TIMEOUT_S = 900  # one read of a 10M-row Parquet takes seconds; minutes means something hangs
_REPO_ROOT = Path(pipeline.__file__).resolve().parents[1]


def run(size: str, settings: Settings, *, world_size: int = WORLD_SIZE) -> dict[str, Any]:
    """Run the benchmark; ``size`` is ``default`` (10M rows), ``small``, ``tiny`` or a row count (``2m``)."""
    rows = parse_size(size)
    cold_rank = min(COLD_RANK, world_size - 1)
    bench_dir = settings.home_abs / "bench" / "manifest"
    files = ensure_manifest(bench_dir / f"rows-{rows}-v{GENERATOR_VERSION}", rows)
    node_cache = bench_dir / "node-cache"
    shutil.rmtree(node_cache, ignore_errors=True)
    args = {"ipc": str(files.ipc_path), "parquet": str(files.parquet_path), "cache": str(node_cache)}

    try:
        download, per_mode, cold = _measure_all(args, world_size, cold_rank, files.parquet_path)
    finally:
        shutil.rmtree(node_cache, ignore_errors=True)  # a second copy of a multi-GB file: do not keep it

    summary = {mode: _summarise(results) for mode, results in per_mode.items()}
    mmap, read_all, row_groups = summary["mmap"], summary["read_all"], summary["row_groups"]
    return {
        "rss_ratio": _ratio(mmap["rss_anon_growth_bytes_median"], read_all["rss_anon_growth_bytes_median"]),
        "first_batch_speedup": _ratio(read_all["first_batch_s_median"], mmap["first_batch_s_median"]),
        "row_groups_rss_ratio": _ratio(
            mmap["rss_anon_growth_bytes_median"], row_groups["rss_anon_growth_bytes_median"]
        ),
        "row_groups_first_batch_speedup": _ratio(
            row_groups["first_batch_s_median"], mmap["first_batch_s_median"]
        ),
        "cold_rss_ratio": _ratio(
            cold["mmap"]["rss_anon_growth_bytes"], cold["read_all"]["rss_anon_growth_bytes"]
        ),
        "cold_first_batch_speedup": _ratio(cold["read_all"]["first_batch_s"], cold["mmap"]["first_batch_s"]),
        "worst_rank_rss_ratio": max(
            _ratio(m["rss_anon_growth_bytes"], r["rss_anon_growth_bytes"])
            for m, r in zip(per_mode["mmap"], per_mode["read_all"], strict=True)
        ),
        "worst_rank_first_batch_speedup": min(
            _ratio(r["first_batch_s"], m["first_batch_s"])
            for m, r in zip(per_mode["mmap"], per_mode["read_all"], strict=True)
        ),
        "rows": rows,
        "world_size": world_size,
        "batch_rows": BATCH_ROWS,
        "ipc_size_bytes": files.ipc_size_bytes,
        "parquet_size_bytes": files.parquet_size_bytes,
        "ipc_sha256": files.ipc_sha256,
        "download_s": download["first_batch_s"],
        "downloads_by_ranks": sum(r["downloaded"] for r in per_mode["mmap"]),
        "slices_agree": _slices_agree(per_mode, rows),
        "summary": summary,
        "cold_rank": cold_rank,
        "cold": cold,
        "per_rank": per_mode,
        "download": download,
    }


def _measure_all(
    args: dict[str, str], world_size: int, cold_rank: int, parquet_path: Path
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]]]:
    """The download, then every rank in every mode with a warm page cache, then one rank cold."""
    log.info("downloading the manifest into the node cache once")
    download = _child("mmap", 0, world_size, args)
    per_mode: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for rank in range(world_size):
        for mode in MODES:  # interleaved, so drift on a shared machine hits every mode alike
            log.info("rank %d/%d: %s", rank, world_size, mode)
            per_mode[mode].append(_child(mode, rank, world_size, args))
    cold: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        _evict(Path(download["cached_path"]), parquet_path)
        cold[mode] = _child(mode, cold_rank, world_size, args)
    return download, per_mode, cold


def parse_size(size: str) -> int:
    """Row count for ``--size``: a named size or a count with an optional k/m suffix."""
    if size in SIZES:
        return SIZES[size]
    text = size.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit() or int(digits) * scale < 1:
        raise UnknownChoiceError("manifest bench size", size, [*SIZES, "<rows>", "<n>k", "<n>m"])
    return int(digits) * scale


def ensure_manifest(folder: Path, rows: int) -> mf.ManifestFiles:
    """The generated manifest of ``rows`` rows in ``folder``, generated and written only if not there."""
    record = folder / "manifest-files.json"
    if record.exists():
        saved = json.loads(record.read_text())
        files = mf.ManifestFiles(
            **{**saved, "ipc_path": Path(saved["ipc_path"]), "parquet_path": Path(saved["parquet_path"])}
        )
        if (
            files.ipc_path.is_file()
            and files.parquet_path.is_file()
            and files.ipc_path.stat().st_size == files.ipc_size_bytes
            and files.parquet_path.stat().st_size == files.parquet_size_bytes
            and (folder / mf.SUMS_FILE_NAME).is_file()  # what the loader verifies against
            and _schema_metadata(files.ipc_path) == mf.SCHEMA_METADATA  # written by this format version
        ):
            log.info("reusing the generated manifest in %s", folder)
            return files
    log.info("generating a %d-row manifest in %s", rows, folder)
    started = time.perf_counter()
    table = generate_table(rows)
    files = mf.write_manifest(table, folder)
    del table
    gc.collect()
    log.info("generated and wrote it in %.1f s", time.perf_counter() - started)
    record.write_text(
        json.dumps(
            {**files.__dict__, "ipc_path": str(files.ipc_path), "parquet_path": str(files.parquet_path)},
            indent=2,
            sort_keys=True,
        )
    )
    return files


def _schema_metadata(path: Path) -> dict[bytes, bytes]:
    with pa.memory_map(str(path)) as source:
        return dict(pa.ipc.open_file(source).schema.metadata or {})


def generate_table(rows: int, seed: int = 20240611) -> pa.Table:
    """A manifest-shaped table of ``rows`` rows, built with vectorised numpy (seconds for 10M rows)."""
    rng = np.random.default_rng(seed)
    columns: dict[str, list[pa.Array]] = {name: [] for name in mf.REQUIRED_COLUMNS}
    start_ns = np.int64(1_717_000_000) * 1_000_000_000
    for first in range(0, rows, _GEN_CHUNK_ROWS):
        n = min(_GEN_CHUNK_ROWS, rows - first)
        episode = _uuid_matrix(rng, n)
        prefix = np.frombuffer(b"s3://sluice-store/derived/transcode/3f9c2a71b0d4e855/", dtype=np.uint8)
        suffix = np.frombuffer(b"/episode.mcap", dtype=np.uint8)
        uri = np.hstack(
            [np.broadcast_to(prefix, (n, prefix.size)), episode, np.broadcast_to(suffix, (n, suffix.size))]
        )
        # a raw log is cut into about three clips: neighbouring rows share a source
        sources = _hex_matrix(rng, n // 3 + 2, 32)
        source_of_row = (np.arange(first, first + n) // 3) - first // 3
        duration_ns = np.clip(rng.lognormal(np.log(30.0), 0.6, n), 1.0, 600.0) * 1e9
        duration_ns = duration_ns.astype(np.int64)
        gaps_ns = rng.integers(1_000_000_000, 120_000_000_000, n, dtype=np.int64)
        starts = start_ns + np.cumsum(gaps_ns + duration_ns) - duration_ns
        start_ns = starts[-1] + duration_ns[-1]
        columns[mf.EPISODE_ID].append(_strings(episode))
        columns[mf.URI].append(_strings(uri))
        columns[mf.START_NS].append(pa.array(starts))
        columns[mf.END_NS].append(pa.array(starts + duration_ns))
        columns[mf.DURATION_S].append(pa.array(duration_ns / 1e9))
        columns[mf.VENDOR].append(_choice(rng, _VENDORS, n, None))
        for name in mf.QUALITY_SCORE_COLUMNS:
            scores = rng.random(n, dtype=np.float32)
            # the transcode score is missing where an episode has not been transcoded yet
            mask = rng.random(n) < 0.02 if name == mf.QUALITY_TRANSCODE else None
            columns[name].append(pa.array(scores, mask=mask))
        columns[mf.SPLIT].append(_choice(rng, [s.value for s in Split], n, [0.9, 0.05, 0.05]))
        columns[mf.SOURCE_SHA256].append(_strings(sources[source_of_row]))
    return pa.table(
        {
            name: pa.chunked_array(chunks, mf.MANIFEST_SCHEMA.field(name).type)
            for name, chunks in columns.items()
        }
    )


# -- the per-rank subprocess ---------------------------------------------------------------------------------


def _child(mode: str, rank: int, world_size: int, args: dict[str, str]) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return what it printed."""
    command = [sys.executable, "-m", "pipeline.bench.manifest", mode, str(rank), str(world_size)]
    command += [args["ipc"], args["parquet"], args["cache"]]
    done = subprocess.run(command, capture_output=True, text=True, cwd=_REPO_ROOT, timeout=_CHILD_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"manifest bench child {mode} rank {rank} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure(mode: str, rank: int, world_size: int, ipc: str, parquet: str, cache: str) -> dict[str, Any]:
    gc.collect()
    before = _proc_status()
    started = time.perf_counter()
    downloaded = False
    cached_path = ""
    if mode == "mmap":
        # Every row, as the read-all reference slices them (the bench's rows interleave splits).
        manifest = open_manifest(ipc, rank=rank, world_size=world_size, cache_dir=cache, split=None)
        held = manifest.table
        first = next(manifest.batches(BATCH_ROWS), None)
        downloaded, cached_path = manifest.downloaded, str(manifest.path)
    elif mode == "read_all":
        whole = pq.read_table(parquet)
        start, stop = shard_range(whole.num_rows, rank, world_size)
        held = whole.slice(start, stop - start)
        first = _first_batch(held)
    elif mode == "row_groups":
        held = _read_rank_row_groups(parquet, rank, world_size)
        first = _first_batch(held)
    else:
        raise UnknownChoiceError("manifest bench mode", mode, MODES)
    touched = _touch(first)
    first_batch_s = time.perf_counter() - started
    after = _proc_status()
    # Checked after the measurement: it reads the whole slice, which the figures above must not include.
    checksum = int(pc.sum(held.column(mf.START_NS)).as_py() or 0) if held.num_rows else 0
    ids = held.column(mf.EPISODE_ID)
    return {
        "mode": mode,
        "rank": rank,
        "rows": held.num_rows,
        "first_batch_s": first_batch_s,
        "rss_anon_growth_bytes": after["RssAnon"] - before["RssAnon"],
        "rss_growth_bytes": after["VmRSS"] - before["VmRSS"],
        "hwm_growth_bytes": after["VmHWM"] - before["VmHWM"],
        "rss_anon_bytes": after["RssAnon"],
        "rss_bytes": after["VmRSS"],
        "hwm_bytes": after["VmHWM"],
        "baseline_rss_anon_bytes": before["RssAnon"],
        "baseline_rss_bytes": before["VmRSS"],
        "touched": touched,
        "start_ns_sum": checksum,
        "first_episode_id": ids[0].as_py() if held.num_rows else None,
        "last_episode_id": ids[-1].as_py() if held.num_rows else None,
        "downloaded": downloaded,
        "cached_path": cached_path,
    }


def _read_rank_row_groups(parquet: str, rank: int, world_size: int) -> pa.Table:
    file = pq.ParquetFile(parquet)
    start, stop = shard_range(file.metadata.num_rows, rank, world_size)
    groups: list[int] = []
    offset = first_offset = 0
    for index in range(file.metadata.num_row_groups):
        end = offset + file.metadata.row_group(index).num_rows
        if end > start and offset < stop:
            first_offset = offset if not groups else first_offset
            groups.append(index)
        offset = end
    if not groups:
        return file.schema_arrow.empty_table()
    return file.read_row_groups(groups).slice(start - first_offset, stop - start)


def _first_batch(table: pa.Table) -> pa.RecordBatch | None:
    batches = table.slice(0, BATCH_ROWS).to_batches()
    return None if not batches else batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _touch(batch: pa.RecordBatch | None) -> int:
    """Read the batch's values, as a sampler would, so that mapped pages are really faulted in."""
    if batch is None:
        return 0
    total = pc.sum(pc.binary_length(batch.column(mf.URI))).as_py() or 0
    total += pc.sum(pc.binary_length(batch.column(mf.EPISODE_ID))).as_py() or 0
    total += int(pc.sum(batch.column(mf.DURATION_S)).as_py() or 0)
    return int(total)


def _proc_status() -> dict[str, int]:
    """Memory figures of this process in bytes, from /proc/self/status (``ru_maxrss`` can be the parent's)."""
    found = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) * 1024
    return found


# -- helpers ------------------------------------------------------------------------------------------------


def _evict(*paths: Path) -> None:
    """Drop these files' pages from the page cache (clean pages only: the files are fsynced)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _summarise(results: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in ("first_batch_s", "rss_anon_growth_bytes", "rss_growth_bytes", "hwm_growth_bytes"):
        values = [r[key] for r in results]
        out[f"{key}_median"] = statistics.median(values)
        out[f"{key}_max"] = max(values)
    return out


def _ratio(numerator: float, denominator: float) -> float:
    # growth can come out a few pages below zero (allocator returning memory): count it as none
    numerator, denominator = max(numerator, 0.0), max(denominator, 0.0)
    return round(numerator / denominator, 4) if denominator else float("inf")


def _slices_agree(per_mode: dict[str, list[dict[str, Any]]], rows: int) -> bool:
    """Every mode gave every rank the same rows, and the ranks' rows add up to the manifest."""
    keys = ("rows", "start_ns_sum", "first_episode_id", "last_episode_id")
    for rank in range(len(per_mode["mmap"])):
        seen = {tuple(per_mode[mode][rank][k] for k in keys) for mode in MODES}
        if len(seen) != 1:
            return False
    return sum(r["rows"] for r in per_mode["mmap"]) == rows


def _hex_matrix(rng: np.random.Generator, rows: int, nbytes: int) -> np.ndarray:
    raw = rng.integers(0, 256, size=(rows, nbytes), dtype=np.uint8)
    out = np.empty((rows, 2 * nbytes), dtype=np.uint8)
    out[:, 0::2] = _HEX[raw >> 4]
    out[:, 1::2] = _HEX[raw & 15]
    return out


def _uuid_matrix(rng: np.random.Generator, rows: int) -> np.ndarray:
    digits = _hex_matrix(rng, rows, 16)
    dash = np.full((rows, 1), ord("-"), dtype=np.uint8)
    parts = [
        digits[:, 0:8],
        dash,
        digits[:, 8:12],
        dash,
        digits[:, 12:16],
        dash,
        digits[:, 16:20],
        dash,
        digits[:, 20:32],
    ]
    return np.hstack(parts)


def _strings(matrix: np.ndarray) -> pa.Array:
    """Fixed-width ASCII rows of a uint8 matrix as an Arrow string array, without a Python loop."""
    rows, width = matrix.shape
    offsets = np.arange(rows + 1, dtype=np.int32) * np.int32(width)
    data = np.ascontiguousarray(matrix)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data))


def _choice(rng: np.random.Generator, values: Any, rows: int, p: list[float] | None) -> pa.Array:
    indices = rng.choice(len(values), size=rows, p=p).astype(np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(indices), pa.array(list(values))).cast(pa.string())


def _main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="One rank's measurement (run by sluice bench manifest).")
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("rank", type=int)
    parser.add_argument("world_size", type=int)
    parser.add_argument("ipc")
    parser.add_argument("parquet")
    parser.add_argument("cache")
    ns = parser.parse_args(argv)
    result = _measure(ns.mode, ns.rank, ns.world_size, ns.ipc, ns.parquet, ns.cache)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    _main(sys.argv[1:])
