"""The training-side sample loader: batches of samples at random times in a rank's manifest rows.

Usage from a training job (no Airflow, Ray or DuckDB is imported)::

    from pipeline.manifest import open_manifest
    from pipeline.reader import SampleLoader

    manifest = open_manifest(uri, rank=rank, world_size=world_size, cache_dir="/local/nvme/manifests")
    with SampleLoader(manifest, batch_size=32, workers=4, prefetch=4, seed=rank) as loader:
        loader.open_readers()                       # optional warm-up: open files on every thread
        for step, batch in zip(range(steps), loader):
            ...  # batch: a list of Sample; batch.rows: the loader row each sample came from

Each sample is drawn from a row chosen uniformly among the loader's rows, at a time uniform in the part of
the row's ``start_ns`` .. ``end_ns`` window (clipped to the episode file's own span) that leaves room for
the sample's history (``window_s``, and the frames' ``(frames_per_camera - 1) * frame_stride_s``). The
(row, position) draws come from one :class:`random.Random` seeded with ``seed`` on the consuming thread,
batch after batch, so the sequence of samples depends on the seed and the rows only, never on ``workers``
or ``prefetch``.

``processes=True`` reads samples in ``workers`` spawned processes instead of threads: decoding is spread
over the cores past the GIL (PyAV releases it inside libavcodec, but the per-frame Python work of parsing,
planning and converting does not), at the cost of pickling each sample's frames back to the training
process. Each process keeps its own readers (``max_open_readers`` of them) and opens the first episode
files when it starts.

Only transcoded robot episodes (MCAP files, ``uri`` ending in ``.mcap``) can be sampled. Rows of any other
kind, such as a vendor video's MP4 clips, are refused when the loader is made
(:class:`UnsupportedRowsError`, naming them) unless ``skip_unsupported=True``, which leaves them out and
logs how many were left out: training never meets them mid-run.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import threading
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import SluiceError
from pipeline.manifest import Manifest
from pipeline.manifest import format as mf
from pipeline.reader.counters import ReadCounters
from pipeline.reader.sample import NS_PER_S, SECONDS, EpisodeReader, Sample, is_seconds

log = logging.getLogger(__name__)

#: The only file kind the loader reads (the transcode's ``episode.mcap``), matched on the uri's end.
SUPPORTED_SUFFIX = ".mcap"
#: Rows named in an :class:`UnsupportedRowsError` message; the rest are counted.
_ROWS_SHOWN = 5
#: Readers each worker thread keeps open by default. Each holds a file handle, the episode's index and a
#: decoder per camera; 64 per thread keeps a rank of 4-8 workers a few hundred descriptors below the
#: common 1024 open-file limit while a manifest shard of a few dozen hot episodes never reopens a file.
DEFAULT_MAX_OPEN_READERS = 64
_loader_numbers = count()


class SampleLoaderError(SluiceError):
    """Root of the sample loader's errors."""


class LoaderArgumentError(SampleLoaderError, ValueError):
    """A loader option outside what is allowed."""

    def __init__(self, what: str, value: object, allowed: str) -> None:
        self.value = value
        super().__init__(f"{what} {value!r} is not allowed; expected {allowed}")


class UnsupportedRowsError(SampleLoaderError, ValueError):
    """Rows whose ``uri`` is not a transcoded robot episode (an MCAP file), e.g. a video's MP4 clips.
    ``positions`` number them as the source does (see :class:`SampleReadError`)."""

    def __init__(
        self, positions: Sequence[int], first: Sequence[tuple[str, str]], total: int, rows: str = "row"
    ) -> None:
        self.positions = list(positions)  # of the unsupported rows in the source
        shown = [
            f"{rows} {i} ({episode_id}): {uri}"
            for i, (episode_id, uri) in zip(self.positions, first, strict=False)
        ]
        more = len(self.positions) - len(shown)
        super().__init__(
            f"{len(self.positions)} of {total} rows are not MCAP episodes, which is all the sample loader reads "
            f"(uri ending {SUPPORTED_SUFFIX!r}): "
            + "; ".join(shown)
            + (f"; and {more} more" if more else "")
            + ". Pass skip_unsupported=True to leave them out, or filter them from the rows first."
        )


class SampleReadError(SampleLoaderError):
    """A sample could not be read from its row's file (missing, unreadable, or outside the row's window).

    ``row`` numbers rows as the source does: a :class:`~pipeline.manifest.Manifest`'s row in the whole
    manifest file (what ``sluice lineage manifest:<name>@<version>:<row>`` takes, said "manifest row"), or
    the position in a table or list of rows given instead."""

    def __init__(self, row: int, uri: str, detail: str, rows: str = "row") -> None:
        self.row = row
        self.uri = uri
        super().__init__(f"{rows} {row} ({uri}): {detail}")


class LoaderWorkerDiedError(SampleLoaderError):
    """A worker process died (a signal, the OOM killer, a crash in a decoder) while a batch was being read
    or waited in its queue: the batch is lost. Its cause names the process and how it ended."""

    def __init__(self, rows: Sequence[int], uris: Sequence[str], how: str) -> None:
        self.rows = list(rows)
        self.uris = list(uris)
        super().__init__(
            f"a sample loader worker process died while the batch of rows {self.rows} "
            f"({', '.join(dict.fromkeys(self.uris))}) was being read or waited for it: {how}"
        )


class LoaderClosedError(SampleLoaderError):
    """The loader was used after :meth:`SampleLoader.close`."""


@dataclass(frozen=True)
class EpisodeRow:
    """One row to sample from: an episode file and the window of its timeline to draw times in.

    ``start_ns``/``end_ns`` None: the episode file's whole span.
    """

    uri: str
    episode_id: str = ""
    start_ns: int | None = None
    end_ns: int | None = None
    uri_sha256: str | None = None  # the file's sha256 as the catalog records it (a manifest's rows have it)


class SampleBatch(list[Sample]):
    """A list of samples; ``rows[i]`` is the loader row (index into :attr:`SampleLoader.rows`) of sample i."""

    rows: list[int]


RowsSource = Any  # a Manifest, a pyarrow Table, or a sequence of uris, paths, EpisodeRows or row mappings


class SampleLoader:
    """Batches of samples at random times in random rows, read on a pool of threads, prefetched.

    ``source``: a :class:`pipeline.manifest.Manifest` (its ``table``), a ``pyarrow.Table`` with at least a
    ``uri`` column (``episode_id``, ``start_ns``, ``end_ns`` used when present), or a sequence of local
    paths, fsspec URLs (``file://...``), :class:`EpisodeRow`\\ s or mappings with those keys.

    ``workers`` threads each open their own :class:`~pipeline.reader.EpisodeReader` per episode file (a
    reader is not thread-safe) and keep the ``max_open_readers`` most recently used ones open (the least
    recently used is closed when a thread opens one more; :attr:`readers_closed` counts them), so a rank
    with thousands of episodes stays under the open-file limit. ``prefetch`` batches are requested ahead of
    the one being consumed (0: a batch is read when it is asked for). ``window_s``, ``frames_per_camera``,
    ``frame_stride_s``, ``topics``, ``cameras`` and ``decode`` are passed to
    :meth:`EpisodeReader.sample`; ``storage_options`` to the files' fsspec filesystem.

    Any failure to open a row's file or to read a sample reaches the consumer as a
    :class:`SampleReadError` naming the row and uri (and the sample time), chained from the cause.

    Each episode file is checked before its first sample (once per process): against the row's
    ``uri_sha256`` when the rows carry one (a manifest's do), else against its own CRCs
    (:mod:`pipeline.reader.verify`); a damaged file is a :class:`SampleReadError` whose cause is an
    :class:`~pipeline.reader.verify.EpisodeIntegrityError`. ``verify=False`` skips the check.

    Iterating yields :class:`SampleBatch`\\ es of ``batch_size`` samples without end (take as many steps as
    training needs); iterate once per loader. Use it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        source: RowsSource,
        batch_size: int,
        *,
        workers: int = 2,
        prefetch: int = 2,
        seed: int = 0,
        window_s: float = 2.0,
        frames_per_camera: int = 2,
        frame_stride_s: float = 0.1,
        topics: Sequence[str] | None = None,
        cameras: Sequence[str] | None = None,
        decode: bool = True,
        skip_unsupported: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        max_open_readers: int = DEFAULT_MAX_OPEN_READERS,
        processes: bool = False,
        verify: bool = True,
    ) -> None:
        _check_int("batch_size", batch_size, 1)
        _check_int("workers", workers, 1)
        _check_int("max_open_readers", max_open_readers, 1)
        _check_int("prefetch", prefetch, 0)
        _check_int("frames_per_camera", frames_per_camera, 1)
        _check_seconds("window_s", window_s)
        _check_seconds("frame_stride_s", frame_stride_s)
        for what, names in (("topics", topics), ("cameras", cameras)):
            if isinstance(names, str | bytes):  # would be read as one name per character
                raise LoaderArgumentError(what, names, "a list of names (or None for the episode's own)")
        table = _rows_table(source)
        # errors name a row as the source numbers it: a rank's manifest rows from its first row in the file
        self._first_row, self._rows_word = (
            (source.row_start, "manifest row") if isinstance(source, Manifest) else (0, "row")
        )
        supported = _supported_positions(table, skip_unsupported, self._first_row, self._rows_word)
        if supported.size == 0:
            raise LoaderArgumentError("source", _described(source, table), _NONE_READABLE)
        self._table = table
        # looked up once: by name on every row, they were most of a row's cost (11 -> 3 us)
        self._columns = [(name, table.column(name)) for name in table.column_names]
        self._positions = supported
        self.verify = verify
        self._expected_sha256 = _recorded_digests(table)
        self.batch_size = batch_size
        self.workers = workers
        self.prefetch = prefetch
        self.seed = seed
        self.max_open_readers = max_open_readers
        self.sample_options: dict[str, Any] = {
            "window_s": window_s,
            "frames_per_camera": frames_per_camera,
            "frame_stride_s": frame_stride_s,
            "topics": None if topics is None else list(topics),
            "cameras": None if cameras is None else list(cameras),
            "decode": decode,
        }
        # history a sample needs before its time: the state window, and the oldest of its frames
        self._room_ns = int(max(window_s, (frames_per_camera - 1) * frame_stride_s) * NS_PER_S)
        self._storage_options = dict(storage_options or {})
        self._rng = random.Random(seed)
        self._local = threading.local()
        self._lock = threading.Lock()
        # thread name -> uri -> reader, least recently used first
        self._readers: dict[str, OrderedDict[str, EpisodeReader]] = {}
        self._retired = ReadCounters()  # what the readers closed on eviction had read
        self._returned = ReadCounters()  # what samples read in worker processes cost
        self.readers_closed = 0  # readers closed on eviction so far
        self.thread_name_prefix = f"sluice-loader-{next(_loader_numbers)}"
        self.processes = processes
        # the names of this loader's shared-memory segments (pipeline.reader.shared) start with this
        self.segment_prefix = f"sluice-{os.getpid()}-{secrets.token_hex(3)}-"
        self._unclaimed: set[Future[Any]] = set()  # process tasks whose frames nobody has taken yet
        self._pool: Executor
        if processes:
            # clean spawned children: a forked one would inherit the training process's threads and locks,
            # and none re-imports the training script (pipeline.processes)
            from pipeline.processes import WorkerPool
            from pipeline.reader import worker

            self._pool = WorkerPool(
                workers,
                name="sample loader",
                initializer=worker.init,
                initargs=(
                    self._storage_options,
                    max_open_readers,
                    self.uris[:max_open_readers],
                    self._expected_sha256,
                    verify,
                    self.segment_prefix,
                ),
            )
        else:
            self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=self.thread_name_prefix)
        self._closed = False
        log.info(
            "sample loader over %d rows (%d files), batch %d, %d worker(s), prefetch %d, seed %d",
            len(self), len(self.uris), batch_size, workers, prefetch, seed,
        )  # fmt: skip

    # -- what it samples ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Rows samples are drawn from (unsupported rows left out)."""
        return int(self._positions.size)

    @property
    def rows(self) -> list[EpisodeRow]:
        """The rows samples are drawn from, in order; :attr:`SampleBatch.rows` indexes this list."""
        return [self._row(i) for i in range(len(self))]

    @property
    def uris(self) -> list[str]:
        """The distinct episode files of the rows, in first-seen order."""
        column = self._table.column("uri").take(pa.array(self._positions))
        return list(dict.fromkeys(column.to_pylist()))

    def _row(self, index: int) -> EpisodeRow:
        position = int(self._positions[index])
        return EpisodeRow(**{name: column[position].as_py() for name, column in self._columns})

    def source_row(self, index: int) -> int:
        """The source's number of :attr:`rows` ``[index]``: its manifest row for a
        :class:`~pipeline.manifest.Manifest` (what errors name), else its position in the rows given."""
        return self._first_row + int(self._positions[index])

    # -- lifecycle ------------------------------------------------------------------------------------

    def open_readers(self) -> None:
        """Open the first ``max_open_readers`` episode files on every worker thread now (a training job's
        warm-up before its first step), so that steps pay for reading samples, not for opening files and
        indexing them. Raises :class:`SampleReadError` naming the first file that cannot be opened."""
        self._check_open()
        if self.processes:
            self._open_process_readers()
            return
        rows = self._first_rows()
        uris = list(rows)[: self.max_open_readers]
        together = threading.Barrier(self.workers)

        def open_all() -> None:
            together.wait()  # one task per thread: each waits until every thread holds one
            for uri in uris:
                try:
                    self._reader(uri)
                except Exception as exc:
                    raise SampleReadError(
                        rows[uri], uri, f"cannot open the episode: {exc!r}", self._rows_word
                    ) from exc

        for future in [self._pool.submit(open_all) for _ in range(self.workers)]:
            future.result()

    def _open_process_readers(self) -> None:
        """Wait until every worker process has started (its initializer opens the first files); a file that
        cannot be opened is raised here as a :class:`SampleReadError`."""
        from pipeline.reader import worker

        seen: set[int] = set()
        for _ in range(20):  # the pool starts processes as work arrives: ask until each has answered
            for future in [self._pool.submit(worker.warm, 0.05) for _ in range(self.workers)]:
                pid, failed = future.result()
                if failed is not None:
                    uri, detail = failed
                    raise SampleReadError(
                        self._first_rows()[uri], uri, f"cannot open the episode: {detail}", self._rows_word
                    )
                seen.add(pid)
            if len(seen) >= self.workers:
                return

    def _first_rows(self) -> dict[str, int]:
        """uri -> the source's number of the first row with it (for an error about the file)."""
        rows: dict[str, int] = {}
        for index, uri in enumerate(self._table.column("uri").take(pa.array(self._positions)).to_pylist()):
            rows.setdefault(uri, self.source_row(index))
        return rows

    def close(self) -> None:
        """Stop the workers (pending batches are dropped, and the shared memory of any they had read is
        freed) and close every reader. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.processes:
            from pipeline.reader import shared

            with self._lock:
                unclaimed, self._unclaimed = list(self._unclaimed), set()
            for future in unclaimed:
                _drop(future)
            left = shared.sweep(self.segment_prefix)  # a worker that died may have left a segment
            if left:
                log.warning("sample loader: removed %d shared-memory segment(s) nobody took", len(left))
        with self._lock:
            readers = [r for per_thread in self._readers.values() for r in per_thread.values()]
            self._readers.clear()
        for reader in readers:
            reader.close()

    def __enter__(self) -> SampleLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def worker_pids(self) -> list[int]:
        """The process ids of the worker processes running now (``processes=True``; none on threads, and
        none before the first batch or :meth:`open_readers` started them)."""
        if not self.processes:
            return []
        from pipeline.processes import WorkerPool

        assert isinstance(self._pool, WorkerPool)
        return self._pool.pids()

    def readers_by_thread(self) -> dict[str, dict[str, EpisodeReader]]:
        """The open readers: thread name -> uri -> reader (least recently used first). For inspection
        only: a reader belongs to its thread and must not be sampled from elsewhere."""
        with self._lock:
            return {name: dict(per_thread) for name, per_thread in self._readers.items()}

    def totals(self) -> ReadCounters:
        """What every sample so far cost, summed over all readers, closed ones included (see
        :class:`ReadCounters`)."""
        total = ReadCounters()
        with self._lock:
            total.add(self._retired)
            total.add(self._returned)
        for per_thread in self.readers_by_thread().values():
            for reader in per_thread.values():
                total.add(reader.totals)
        return total

    # -- iteration ------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[SampleBatch]:
        self._check_open()
        pending: deque[tuple[list[int], list[Future[Any]]]] = deque()
        try:
            while True:
                self._check_open()
                if not pending:
                    pending.append(self._submit())
                rows, futures = pending.popleft()
                batch = SampleBatch(self._collect(rows, futures))
                batch.rows = rows
                # Refill after collecting: submitting wakes the workers, which then compete for the GIL
                # with this thread; collecting first keeps a ready batch from waiting on them.
                while len(pending) < self.prefetch:
                    pending.append(self._submit())
                yield batch
        finally:
            for _, futures in pending:
                for future in futures:
                    self._forget(future)

    def _collect(self, rows: list[int], futures: list[Future[Any]]) -> list[Sample]:
        """The samples of one batch's futures, in order (one per sample on threads; one per part of the
        batch in processes, whose frames are taken from shared memory here)."""
        if not self.processes:
            return [future.result() for future in futures]
        from pipeline.processes import WorkerCrashedError
        from pipeline.reader import shared

        samples: list[Sample] = []
        for number, future in enumerate(futures):
            try:
                part = future.result()
            except BaseException as exc:
                for later in futures[number:]:
                    self._forget(later)
                if isinstance(exc, WorkerCrashedError):
                    uris = [self._row(index).uri for index in rows]
                    raise LoaderWorkerDiedError(rows, uris, str(exc)) from exc
                raise
            with self._lock:
                self._unclaimed.discard(future)
                self.readers_closed += part.readers_closed
                for sample in part.samples:
                    self._returned.add(sample.counters)
            if part.frames is not None:
                shared.import_frames(part.samples, part.frames)
            samples += part.samples
        return samples

    def _forget(self, future: Future[Any]) -> None:
        """Drop a task nobody will take: cancelled if it has not started, else (a process task) its frames
        freed when it is done. Once per task: close() may have dropped it already."""
        if not self.processes:
            future.cancel()
            return
        with self._lock:
            if future not in self._unclaimed:
                return
            self._unclaimed.discard(future)
        _drop(future)

    def draws(self, batches: int) -> list[list[tuple[int, float]]]:
        """The (row, position in [0, 1)) draws of the first ``batches`` batches for this loader's seed,
        without reading anything: the row's sample time is the position along its window's room."""
        rng = random.Random(self.seed)
        return [self._picks(rng) for _ in range(batches)]

    def _submit(self) -> tuple[list[int], list[Future[Any]]]:
        if self._closed:
            raise LoaderClosedError("the sample loader was closed while iterating")
        picks = self._picks(self._rng)
        rows = [row for row, _ in picks]
        if not self.processes:
            return rows, [self._pool.submit(self._sample, *pick) for pick in picks]
        from pipeline.reader import worker

        # One task per worker, each a consecutive part of the batch: the batch is read on every core at
        # once, and the pool's per-task cost (a pickled call and result, two thread hand-offs on either
        # side) is paid per part rather than per sample.
        futures: list[Future[Any]] = []
        for part in _parts(picks, self.workers):
            task = [(self.source_row(index), self._row(index), where) for index, where in part]
            futures.append(
                self._pool.submit(worker.read_part, task, self._room_ns, self.sample_options, self._rows_word)
            )
        with self._lock:
            self._unclaimed.update(futures)
        return rows, futures

    def _picks(self, rng: random.Random) -> list[tuple[int, float]]:
        return [(rng.randrange(len(self)), rng.random()) for _ in range(self.batch_size)]

    def _sample(self, index: int, where: float) -> Sample:
        """One sample of row ``index`` on this worker thread (see :func:`sample_row`)."""
        return sample_row(
            self._reader,
            self.source_row(index),
            self._row(index),
            where,
            self._room_ns,
            self.sample_options,
            self._rows_word,
        )

    def _reader(self, uri: str) -> EpisodeReader:
        """This thread's reader of ``uri``, opened if needed; the thread's least recently used reader is
        closed first when it already holds ``max_open_readers``."""
        cache: OrderedDict[str, EpisodeReader] | None = getattr(self._local, "readers", None)
        if cache is None:
            cache = self._local.readers = OrderedDict()
            with self._lock:
                self._readers[threading.current_thread().name] = cache
        reader = cache.get(uri)
        if reader is not None:
            with self._lock:  # readers_by_thread() copies the cache on another thread
                cache.move_to_end(uri)
            return reader
        while len(cache) >= self.max_open_readers:
            with self._lock:
                _, oldest = cache.popitem(last=False)
                self._retired.add(oldest.totals)
                self.readers_closed += 1
            oldest.close()
        reader = EpisodeReader(
            uri,
            storage_options=self._storage_options,
            expected_sha256=self._expected_sha256.get(uri),
            verify=self.verify,
        )
        with self._lock:
            cache[uri] = reader
        return reader

    def _check_open(self) -> None:
        if self._closed:
            raise LoaderClosedError("the sample loader is closed; make a new one")


def sample_row(
    reader_of: Any,
    number: int,
    row: EpisodeRow,
    where: float,
    room_ns: int,
    options: Mapping[str, Any],
    rows: str = "row",
) -> Sample:
    """The sample of ``row`` at ``where`` along its window's room, read with ``reader_of(uri)``; whatever
    goes wrong reaches training as a :class:`SampleReadError` naming the row (``rows`` ``number``, as the
    source numbers it) and its uri, chained from the cause."""
    try:
        reader = reader_of(row.uri)
        start_ns, end_ns = reader.start_ns, reader.end_ns
    except Exception as exc:  # missing, damaged, not an episode, or nothing to sample in
        raise SampleReadError(number, row.uri, f"cannot open the episode: {exc!r}", rows) from exc
    lo = start_ns if row.start_ns is None else max(row.start_ns, start_ns)
    hi = end_ns if row.end_ns is None else min(row.end_ns, end_ns)
    if hi < lo:
        raise SampleReadError(
            number,
            row.uri,
            f"its window {row.start_ns}..{row.end_ns} ns is outside the file's {start_ns}..{end_ns} ns",
            rows,
        )
    earliest = min(lo + room_ns, hi)
    t_ns = earliest + int(where * (hi - earliest))
    try:
        return reader.sample(t_ns, **options)
    except Exception as exc:  # a damaged chunk or frame: the row and time say where to look
        raise SampleReadError(number, row.uri, f"sample at {t_ns} ns: {exc!r}", rows) from exc


def _parts(picks: list[tuple[int, float]], workers: int) -> list[list[tuple[int, float]]]:
    """``picks`` cut into ``workers`` consecutive parts as even as can be (no empty part)."""
    parts = min(workers, len(picks))
    size, extra = divmod(len(picks), parts)
    out, start = [], 0
    for number in range(parts):
        end = start + size + (number < extra)
        out.append(picks[start:end])
        start = end
    return out


def _drop(future: Future[Any]) -> None:
    """Cancel a process task, or free the shared memory of its frames once it is done."""
    if not future.cancel():
        future.add_done_callback(_release_frames)


def _release_frames(future: Future[Any]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    from pipeline.reader import shared

    shared.release(future.result().frames)


# -- rows -------------------------------------------------------------------------------------------------

# the manifest's own column names; start and end may be missing from a list of plain URIs
_ROW_FIELDS = (
    pa.field(mf.URI, pa.string(), nullable=False),
    pa.field(mf.EPISODE_ID, pa.string(), nullable=False),
    pa.field(mf.START_NS, pa.int64()),
    pa.field(mf.END_NS, pa.int64()),
    pa.field(mf.URI_SHA256, pa.string()),
)

#: What Arrow raises for a value that does not fit its column (a string, a fraction, past int64).
_CONVERSION_ERRORS = (pa.ArrowException, OverflowError, TypeError)
_ROW_VALUES = (
    "start_ns and end_ns as integer nanoseconds within int64 (or None), uri and uri_sha256 as strings"
)


def _rows_table(source: RowsSource) -> pa.Table:
    """The source's rows as a table of ``uri``, ``episode_id``, ``start_ns``, ``end_ns`` (zero-copy for a
    manifest's columns: a memory-mapped manifest stays mapped)."""
    table = getattr(source, "table", source)
    if isinstance(table, pa.Table | pa.RecordBatch):
        if "uri" not in table.column_names:
            raise LoaderArgumentError("source columns", table.column_names, "a 'uri' column")
        columns = []
        for field in _ROW_FIELDS:
            if field.name in table.column_names:
                column = table.column(field.name)
                try:
                    columns.append(column.cast(field.type))
                except _CONVERSION_ERRORS as exc:
                    raise LoaderArgumentError(
                        f"source column {field.name!r} of type", str(column.type), _ROW_VALUES + f" ({exc})"
                    ) from exc
            elif field.name == "episode_id":
                columns.append(table.column("uri").cast(pa.string()))
            else:
                columns.append(pa.nulls(table.num_rows, field.type))
        return pa.Table.from_arrays(columns, schema=pa.schema(_ROW_FIELDS))
    if isinstance(source, str | Path) or not isinstance(source, Sequence):
        raise LoaderArgumentError(
            "source",
            type(source).__name__,
            "a Manifest, a pyarrow Table, or a sequence of uris, paths, EpisodeRows or row mappings",
        )
    records = [
        {
            "uri": r.uri,
            "episode_id": r.episode_id,
            "start_ns": r.start_ns,
            "end_ns": r.end_ns,
            "uri_sha256": r.uri_sha256,
        }
        for r in map(_as_row, source)
    ]
    schema = pa.schema(_ROW_FIELDS)
    try:
        return pa.Table.from_pylist(records, schema=schema)
    except _CONVERSION_ERRORS as exc:
        bad = next((n for n, record in enumerate(records) if not _converts(record, schema)), None)
        what, value = ("rows", f"{len(records)} rows") if bad is None else (f"row {bad}", records[bad])
        raise LoaderArgumentError(what, value, _ROW_VALUES + f" ({exc})") from exc


def _converts(record: dict[str, Any], schema: pa.Schema) -> bool:
    try:
        pa.Table.from_pylist([record], schema=schema)
    except _CONVERSION_ERRORS:
        return False
    return True


def _recorded_digests(table: pa.Table) -> dict[str, str]:
    """uri -> recorded sha256, for the rows that carry one (distinct pairs found by Arrow, not Python)."""
    digests = table.column(mf.URI_SHA256)
    if digests.null_count == len(digests):
        return {}
    pairs = (
        table.select([mf.URI, mf.URI_SHA256])
        .filter(pc.is_valid(digests))
        .group_by([mf.URI, mf.URI_SHA256])
        .aggregate([])
    )
    return dict(zip(pairs.column(mf.URI).to_pylist(), pairs.column(mf.URI_SHA256).to_pylist(), strict=True))


def _as_row(item: Any) -> EpisodeRow:
    if isinstance(item, EpisodeRow):
        return item
    if isinstance(item, str | Path):
        return EpisodeRow(str(item), str(item))
    if isinstance(item, Mapping) and "uri" in item:
        uri = str(item["uri"])
        return EpisodeRow(
            uri,
            str(item.get("episode_id") or uri),
            item.get("start_ns"),
            item.get("end_ns"),
            item.get("uri_sha256"),
        )
    raise LoaderArgumentError("row", item, "a uri, a path, an EpisodeRow or a mapping with a 'uri' key")


def _supported_positions(table: pa.Table, skip_unsupported: bool, first_row: int, rows: str) -> np.ndarray:
    """Positions of the rows the loader can read; the others refused (numbered from ``first_row``) or, with
    ``skip_unsupported``, left out with a logged count."""
    mcap = pc.ends_with(pc.utf8_lower(table.column("uri")), SUPPORTED_SUFFIX)
    mask = np.asarray(mcap.to_numpy(zero_copy_only=False), dtype=bool)
    unsupported = np.flatnonzero(~mask)
    if unsupported.size:
        if not skip_unsupported:
            first = table.take(pa.array(unsupported[:_ROWS_SHOWN])).to_pylist()
            raise UnsupportedRowsError(
                (first_row + unsupported).tolist(),
                [(r["episode_id"], r["uri"]) for r in first],
                table.num_rows,
                rows,
            )
        log.warning(
            "sample loader: left out %d of %d rows that are not MCAP episodes (e.g. video clips)",
            unsupported.size, table.num_rows,
        )  # fmt: skip
    return np.flatnonzero(mask)


_NONE_READABLE = (
    "at least one MCAP episode row (a rank's share of a version that mixes robot episodes with video clips "
    "can hold clips only: filter the spec to robot episodes with kind = 'mcap', or use fewer ranks)"
)


def _described(source: RowsSource, table: pa.Table) -> str:
    """What the loader was given, for an error: a rank's place in its manifest, or a count of rows."""
    if isinstance(source, Manifest):
        return (
            f"rank {source.rank} of {source.world_size}: manifest rows {source.row_start}..{source.row_stop} "
            f"of split {source.split or 'all'} ({table.num_rows} rows)"
        )
    return f"{table.num_rows} rows"


def _check_seconds(what: str, value: float) -> None:
    if not is_seconds(value):
        raise LoaderArgumentError(what, value, SECONDS)


def _check_int(what: str, value: int, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise LoaderArgumentError(what, value, f"an integer >= {least}")
