"""How a source's bytes get into a staging file of the store: copied, hashed and verified.

:func:`stage_local` serves local stores, :func:`stage_fsspec` every other fsspec store; both return the
sha256 of what they copied (the object's identity) and raise :class:`~pipeline.errors.StoreError` when the
staged copy does not read back as written. Publishing is :meth:`pipeline.store.Store.land`'s business.

On a local store the copy goes around the page cache (``O_DIRECT``, from a few reused 8 MiB buffers, written
on a helper thread of their own). On the shared VMs we run on, every fresh page of memory must be handed
over by the host (free pages are reported back to it at once): in one-off measurements first touch took
0.45-1.0 s/GB and a buffered landing spent 0.6-2.5 s/GB in the kernel, swinging with the host's load,
against ~0.73 s/GB for sha256 itself (1,377 MB/s in ``results/ingest.json``). Writing from reused buffers
pays nothing of the kind.

The verify runs after the fsync and re-reads from the device, so it proves more than a re-read of the
page cache could: that the device returns the bytes that were hashed. Re-reading every byte costs more
than sha256 over the same bytes on this VM (the disk cannot read beside the write: ``sluice bench
ingest`` reports landing with a full re-read at 693 MB/s, ``land_full_verify_ratio`` 0.503), so by default (``verify="sample"``) it
re-reads the first and the last MiB and each other MiB with probability 1/16, drawn afresh for every
landing, and checks each piece's length and CRC32C against the CRC32C of the buffer that was written
there, and the file's size. A wrongly sized copy and any damage to its first or last MiB are always
caught; a damaged region of k MiB elsewhere (a lost, misplaced or zero-filled write) with probability
1 - (15/16)^k: 40% for 8 MiB, 87% for 32 MiB, 98% for 64 MiB. A lone flipped bit elsewhere is not: that
is what :meth:`Store.scrub` (a full re-hash) is for. ``verify="full"`` re-reads and checks every MiB. On a
filesystem that refuses ``O_DIRECT`` the same copy is buffered and the verify re-reads the page cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import mmap
import os
import random
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import BinaryIO, Literal, get_args

import fsspec
import google_crc32c

from pipeline.errors import StoreError

log = logging.getLogger(__name__)

Verify = Literal["sample", "full"]
VERIFY_MODES: tuple[str, ...] = get_args(Verify)

#: 8 MiB blocks: large enough that hashlib and crc32c release the GIL and amortise per-call overhead,
#: small enough that the few blocks in flight stay well under 100 MiB.
BLOCK_BYTES = 8 << 20
#: Blocks queued for the hashing (and, locally, the writing) thread before the copy waits for them: the
#: local copy keeps one more block to fill meanwhile, so each concurrent lander holds 41 MiB of buffers (five
#: blocks and the verify's 1 MiB), kept for the next landing.
MAX_BLOCKS_IN_FLIGHT = 4
#: The first block of a local copy: hashing waits for it, so it is small (a multiple of VERIFY_PIECE_BYTES
#: and of DIRECT_ALIGN, so that later blocks stay aligned to both).
FIRST_BLOCK_BYTES = 1 << 20
#: O_DIRECT wants offsets, lengths and buffer addresses aligned to the logical block size; 4 KiB covers
#: 512 B and 4 KiB sector disks alike (mmap'd buffers are page aligned).
DIRECT_ALIGN = 4096
#: The unit the verify re-reads and checks: small enough that a sample spreads over a file, large enough
#: that each read runs at the disk's streaming speed (1 MiB O_DIRECT reads were the fastest size measured).
VERIFY_PIECE_BYTES = 1 << 20
#: The sampled verify re-reads each piece (beside the first and the last) with this probability: 1/16 of
#: the disk reads of a full re-read, which costs landing ~0.65 s/GB here (results/ingest.json: 1,266 MB/s
#: sampled, 693 MB/s full).
VERIFY_SAMPLE_PROBABILITY = 1 / 16


@dataclass
class Copied:
    """What the copy wrote: its sha256, its size and the CRC32C of each piece the verify will re-read."""

    sha256: str = ""
    size_bytes: int = 0
    pieces: dict[int, tuple[int, int]] = field(default_factory=dict)  # offset -> (length, crc32c)


def verify_offsets(size: int, verify: Verify, rng: random.Random | None = None) -> set[int]:
    """Offsets of the ``VERIFY_PIECE_BYTES`` pieces the verify re-reads: every piece (``full``), or the
    first and the last MiB and each other piece with probability ``VERIFY_SAMPLE_PROBABILITY``."""
    rng = rng or random.Random(
        os.urandom(16)
    )  # a fresh sample per landing: no region goes unchecked for good
    probability = 1.0 if verify == "full" else VERIFY_SAMPLE_PROBABILITY
    last_piece = max(size - 1, 0) // VERIFY_PIECE_BYTES * VERIFY_PIECE_BYTES
    # The piece holding the last byte can be a single byte long: the one before it is always checked too,
    # so that the last MiB of the file always is.
    always = {0, last_piece, max(last_piece - VERIFY_PIECE_BYTES, 0)}
    return always | {
        offset
        for offset in range(VERIFY_PIECE_BYTES, last_piece, VERIFY_PIECE_BYTES)
        if rng.random() < probability
    }


def stage_local(src: BinaryIO, staging: str, size: int, *, verify: Verify) -> Copied:
    """Copy the open source ``src`` (``size`` bytes when opened) into ``staging`` around the page cache,
    fsync it, re-read the verify's pieces from the device."""
    wanted = verify_offsets(size, verify)
    digest = hashlib.sha256()
    with (
        _BUFFERS.ring() as (ring, verify_buf),
        # exits before the ring goes back to the pool: no helper still reads a block by then
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256") as hasher,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="write") as writer,
    ):
        fd, direct = _open_staging(staging)
        try:
            copied, hashing = _copy_to_fd(src, fd, ring, wanted, digest.update, hasher, writer)
            os.ftruncate(fd, copied.size_bytes)  # drops the zeros padding the last block to DIRECT_ALIGN
            os.fsync(fd)
        finally:
            os.close(fd)
        # sha256 is the slowest of the three, so it is still at work on the last blocks: verifying
        # meanwhile costs no time; it checks the written bytes against CRCs of the same buffers
        _verify_pieces(staging, copied, direct, verify_buf)
        for future in hashing:
            future.result()
    copied.sha256 = digest.hexdigest()
    return copied


def stage_fsspec(fs: fsspec.AbstractFileSystem, src: BinaryIO, staging: str) -> Copied:
    """Object stores: copy the open source ``src`` through an fsspec file object, then re-read every byte
    against a CRC32C."""
    with fs.open(staging, "wb") as dst:
        sha256, crc, size = _copy_hashing(src, dst)
    actual_size = 0
    actual_crc = 0
    with fs.open(staging, "rb") as f:
        while block := f.read(BLOCK_BYTES):
            actual_size += len(block)
            actual_crc = google_crc32c.extend(actual_crc, block)
    if actual_size != size or actual_crc != crc:
        raise StoreError(
            f"staged copy {staging} does not read back as written: "
            f"{actual_size} bytes crc32c {actual_crc:08x}, expected {size} bytes crc32c {crc:08x}"
        )
    return Copied(sha256=sha256, size_bytes=size)


# -- local landing ---------------------------------------------------------------------------------------


class _BufferPool:
    """Rings of page-aligned blocks, reused across landings: fresh memory is what a copy must not touch
    (see the module docstring), and O_DIRECT needs aligned buffers anyway."""

    def __init__(self) -> None:
        self._free: list[tuple[list[mmap.mmap], mmap.mmap]] = []
        self._lock = threading.Lock()
        # A forked child must not fill its parent's rings (nor inherit a lock held by a thread it lacks).
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._free = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def ring(self) -> Iterator[tuple[list[mmap.mmap], mmap.mmap]]:
        """A ring of ``MAX_BLOCKS_IN_FLIGHT + 1`` blocks and a buffer for the verify's reads."""
        with self._lock:
            buffers = self._free.pop() if self._free else None
        if buffers is None:  # one set per concurrent lander, kept for the next one
            ring = [_private_buffer(BLOCK_BYTES) for _ in range(MAX_BLOCKS_IN_FLIGHT + 1)]
            buffers = (ring, _private_buffer(VERIFY_PIECE_BYTES))
        try:
            yield buffers
        finally:
            with self._lock:
                self._free.append(buffers)


def _private_buffer(size: int) -> mmap.mmap:
    """Page-aligned anonymous memory private to this process (``mmap(-1, n)`` alone is MAP_SHARED: a forked
    child writing it would change the parent's bytes)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


_BUFFERS = _BufferPool()


def _open_staging(staging: str) -> tuple[int, bool]:
    """A new staging file for writing, with O_DIRECT where the filesystem takes it; (fd, direct)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(staging, flags | direct, 0o644), True
        except OSError as exc:  # EINVAL: the filesystem (tmpfs) has no direct I/O
            if exc.errno != 22:
                raise
            log.debug("no O_DIRECT on %s (%s); staging through the page cache", staging, exc)
    return os.open(staging, flags, 0o644), False


def _copy_to_fd(
    src: BinaryIO,
    fd: int,
    ring: list[mmap.mmap],
    wanted: set[int],
    hash_update: Callable[[memoryview], None],
    hasher: ThreadPoolExecutor,
    writer: ThreadPoolExecutor,
) -> tuple[Copied, list[Future[None]]]:
    """Copy ``src`` into ``fd`` block by block, hashing each block on ``hasher`` and writing it on ``writer``.

    Returns once every block is written, with the hashing still pending. A block of the ring is refilled
    only once both its hashing and its write are done. The first block is small so that hashing starts
    early. Every block but the last is a multiple of ``DIRECT_ALIGN``, so every write starts aligned; the
    last is padded with zeros to it (the caller truncates the padding away). The CRC32C of each piece in
    ``wanted`` is taken from the buffer that was written. (``wanted`` holds the last piece of the size
    the source had before: if it has another, the caller refuses the copy anyway.)
    """
    copied = Copied()
    in_flight: deque[tuple[Future[None], Future[None]]] = deque()
    offset = 0
    try:
        for turn in itertools.count():
            if len(in_flight) == len(ring):
                _wait(in_flight.popleft())
            buf = ring[turn % len(ring)]
            request = FIRST_BLOCK_BYTES if turn == 0 else len(buf)
            view = memoryview(buf)
            n = _fill(src, view[:request])
            if n == 0:
                break
            padded = -(-n // DIRECT_ALIGN) * DIRECT_ALIGN
            view[n:padded] = bytes(padded - n)
            # one worker each => hashing runs in block order; writes carry their own offsets
            in_flight.append(
                (hasher.submit(hash_update, view[:n]), writer.submit(_pwrite_all, fd, view[:padded], offset))
            )
            for piece in range(offset, offset + n, VERIFY_PIECE_BYTES):
                if piece in wanted:
                    length = min(VERIFY_PIECE_BYTES, offset + n - piece)
                    chunk = bytes(view[piece - offset : piece - offset + length])
                    copied.pieces[piece] = (length, google_crc32c.value(chunk))
            offset += n
            if n < request:
                break
    except BaseException:
        while in_flight:  # never leave a helper reading a block the caller may reuse
            with contextlib.suppress(BaseException):
                _wait(in_flight.popleft())
        raise
    for _, write in in_flight:
        write.result()
    copied.size_bytes = offset
    return copied, [hashing for hashing, _ in in_flight]


def _wait(futures: tuple[Future[None], Future[None]]) -> None:
    for future in futures:
        future.result()


def _fill(src: BinaryIO, view: memoryview) -> int:
    """Read into ``view`` until it is full or the source ends; the number of bytes read."""
    got = 0
    while got < len(view):
        n = src.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            break
        got += n
    return got


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    written = 0
    while written < len(data):
        written += os.pwritev(fd, [data[written:]], offset + written)


def _verify_pieces(staging: str, copied: Copied, direct: bool, buf: mmap.mmap) -> None:
    """Re-read each recorded piece of the fsynced staging file (from the device when ``direct``) and check
    its length and CRC32C; the file's size must be the copied size."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if direct else 0)
    fd = os.open(staging, flags)
    try:
        actual_size = os.fstat(fd).st_size
        if actual_size != copied.size_bytes:
            raise StoreError(
                f"staged copy {staging} is {actual_size} bytes, {copied.size_bytes} were written"
            )
        view = memoryview(buf)
        for offset, (length, crc) in sorted(copied.pieces.items()):
            padded = -(-length // DIRECT_ALIGN) * DIRECT_ALIGN
            got = os.preadv(fd, [view[:padded]], offset)
            actual_crc = google_crc32c.value(bytes(view[:got]))
            if got != length or actual_crc != crc:
                raise StoreError(
                    f"staged copy {staging} does not read back as written at byte {offset}: {got} bytes "
                    f"crc32c {actual_crc:08x}, expected {length} bytes crc32c {crc:08x}"
                )
    finally:
        os.close(fd)


def _copy_hashing(src: BinaryIO, dst: BinaryIO) -> tuple[str, int, int]:
    """Copy ``src`` to ``dst``; sha256 runs on a helper thread while this one writes and CRCs."""
    digest = hashlib.sha256()
    crc = 0
    size = 0
    pending: deque[Future[None]] = deque()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256") as hasher:
        while block := src.read(BLOCK_BYTES):
            # one worker => updates run in submission order
            pending.append(hasher.submit(digest.update, block))
            dst.write(block)
            crc = google_crc32c.extend(crc, block)
            size += len(block)
            if len(pending) >= MAX_BLOCKS_IN_FLIGHT:
                pending.popleft().result()
        for fut in pending:
            fut.result()
    return digest.hexdigest(), crc, size
