"""CPython's cyclic garbage collector paused for a block that makes many short-lived, acyclic objects.

Reference counting frees almost everything a transcode makes (message records, payload bytes, encoded
units): a full collection after one of the benchmark's episodes finds 8 to 20 unreachable objects. The
collector still runs about one full collection per episode, because the episode's objects pass its
allocation thresholds, and a full collection visits every tracked object of the process, not only the
episode's. A step's task process has imported Airflow, SQLAlchemy and PyAV: 170,000 to 200,000 tracked
objects, and one full collection there takes 0.1 s. In ``sluice bench transcode`` (114,000 tracked
objects) such collections took 0.05-0.09 s of the reading process's 0.3-0.6 s of CPU per episode, and one
of them often fell in the read-back check after the last encode, where all of it is wall time.

:func:`cyclic_gc_paused` disables the collector for its block and enables it again when the last block
that paused it ends, if it was enabled before the first. Blocks may nest and may run in several threads at
once; the collector stays paused until none runs. The cycles a block makes (a few, and the traceback of
an error) are collected by the first collection after it. ``gc.freeze`` would spare the import-time heap
too, but only if called at the right moment in the process that runs the step, which the library does not
own. The standard library has no counted pause and no package we depend on provides one, hence this
module.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_pausers = 0
_was_enabled = False


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector disabled (reference counting still frees objects);
    see the module docstring."""
    global _pausers, _was_enabled
    with _lock:
        if _pausers == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pausers += 1
    try:
        yield
    finally:
        with _lock:
            _pausers -= 1
            if _pausers == 0 and _was_enabled:
                gc.enable()
