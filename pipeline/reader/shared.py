"""Decoded frames handed from a sample loader's worker process to the training process in shared memory.

Pickled through the process pool's pipe, each picture was copied four times (into the pickle, into the
pipe, out of it, into a new array) in small pipe-sized pieces, half of that in the training process, whose
core the workers share. Here a worker writes the frames of its task once into a new POSIX shared-memory
segment (:func:`export_frames`) and returns only the segment's name and each frame's place in it. The
training process maps the segment, removes its name at once (the pages live as long as a mapping does) and
hands out arrays that view the mapping (:func:`import_frames`): no copy on its side, and the memory is given
back when the last array of the segment is dropped, as PyTorch's DataLoader does with tensors in shared
memory. Keeping one frame of a task keeps the whole segment (a few frames' worth) alive.

``multiprocessing.shared_memory.SharedMemory`` is not used to map: closing it (which its finaliser does)
fails while arrays still view its buffer, so the arrays could not outlive it. The same calls it makes are
made here (``_posixshmem``), and each segment is registered with multiprocessing's resource tracker, which
the training process shares with the workers it spawned, until the training process has taken it: a segment
nobody took is removed when the last of those processes ends, however it ends. A loader also removes the
segments of the tasks it never took when it closes (:func:`release`, :func:`sweep`).
"""

from __future__ import annotations

import _posixshmem  # the C module multiprocessing.shared_memory uses
import mmap
import os
from dataclasses import dataclass
from itertools import count
from multiprocessing import resource_tracker
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pipeline.reader.sample import Sample

#: Where POSIX shared-memory names live on Linux (listed only to sweep a loader's leftovers).
SHM_DIR = Path("/dev/shm")
#: Every frame starts on a cache line (and a SIMD-friendly boundary for whoever converts it next).
ALIGN_BYTES = 64
#: The resource tracker's kind for POSIX shared memory.
_TRACKED = "shared_memory"
_segments = count()


@dataclass(frozen=True)
class FramePlace:
    """Where one frame of a task is: its sample (index in the task), camera, position, and the bytes."""

    sample: int
    camera: str
    position: int  # index in the sample's list of that camera's frames
    offset: int
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class SharedFrames:
    """A task's frames in one shared-memory segment (``name`` without the leading slash)."""

    name: str
    size: int
    places: tuple[FramePlace, ...]


def export_frames(samples: list[Sample], prefix: str) -> SharedFrames | None:
    """Move the decoded images of ``samples`` into a new segment named ``prefix`` + a counter (their
    ``image`` becomes None: the training process puts them back with :func:`import_frames`). None when no
    sample has an image (read without decoding, or no cameras)."""
    from pipeline.reader.sample import CameraFrame

    images: list[tuple[FramePlace, np.ndarray]] = []
    size = 0
    for index, sample in enumerate(samples):
        for camera, frames in sample.frames.items():
            for position, frame in enumerate(frames):
                if frame.image is None:
                    continue
                image = np.ascontiguousarray(frame.image)
                size = -(-size // ALIGN_BYTES) * ALIGN_BYTES
                place = FramePlace(index, camera, position, size, tuple(image.shape), image.dtype.str)
                images.append((place, image))
                size += image.nbytes
    if not images:
        return None
    name = f"{prefix}{os.getpid()}-{next(_segments)}"
    fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    resource_tracker.register("/" + name, _TRACKED)
    try:
        os.ftruncate(fd, size)
        for place, image in images:  # written through the file: the kernel allocates the pages as it copies
            view = image.data.cast("B")
            written = 0
            while written < image.nbytes:
                written += os.pwrite(fd, view[written:], place.offset + written)
    except BaseException:
        os.close(fd)
        unlink(name)
        raise
    os.close(fd)
    for sample in samples:
        for camera, frames in sample.frames.items():
            sample.frames[camera] = [
                CameraFrame(f.stamp_ns, None) if f.image is not None else f for f in frames
            ]
    return SharedFrames(name, size, tuple(place for place, _ in images))


def import_frames(samples: list[Sample], shared: SharedFrames) -> None:
    """Put the frames of ``shared`` back into ``samples`` as arrays viewing the segment, whose name is
    removed at once: the memory goes when the last of these arrays does."""
    from pipeline.reader.sample import CameraFrame

    fd = _posixshmem.shm_open("/" + shared.name, os.O_RDWR, mode=0o600)
    try:
        mapping = mmap.mmap(fd, shared.size)
    finally:
        os.close(fd)
        unlink(shared.name)
    for place in shared.places:
        frames = samples[place.sample].frames[place.camera]
        image = np.ndarray(place.shape, np.dtype(place.dtype), buffer=mapping, offset=place.offset)
        frames[place.position] = CameraFrame(frames[place.position].stamp_ns, image)


def unlink(name: str) -> None:
    """Remove a segment's name (mappings of it stay valid) and forget it in the resource tracker; a name
    already gone is left alone."""
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        return
    resource_tracker.unregister("/" + name, _TRACKED)


def release(shared: SharedFrames | None) -> None:
    """Remove the segment of a task whose frames nobody will take."""
    if shared is not None:
        unlink(shared.name)


def sweep(prefix: str) -> list[str]:
    """Remove every segment whose name starts with ``prefix`` (a worker that died may have left one);
    return their names. Only where the names can be listed (Linux's ``/dev/shm``)."""
    if not prefix or not SHM_DIR.is_dir():
        return []
    names = [entry.name for entry in SHM_DIR.iterdir() if entry.name.startswith(prefix)]
    for name in names:
        unlink(name)
    return names
