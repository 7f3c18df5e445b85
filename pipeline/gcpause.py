"""CPython's cyclic garbage collector paused for a block that makes many short-lived, acyclic objects.

Reference counting frees almost everything a transcode makes (message records, payload bytes, encoded
units): a full collection after one of the benchmark's small episodes finds 8 to 20 unreachable objects.
The collector still ran a full collection every one or two episodes, because the episode's objects pass
its allocation thresholds, and a full collection visits every tracked object of the process, not only
the episode's. A process that has imported what a step's task process imports (``airflow.sdk``,
SQLAlchemy, PyAV, the steps) holds 170,000 to 200,000 tracked objects, and one full collection there
took 0.1 s. In ``sluice bench transcode`` (114,000 tracked objects) the collector took 0.01-0.10 s of the
reading process's 0.3-0.6 s of CPU per episode, and a full collection often fell in the read-back check
after the last encode, where all of it is wall time.

:func:`cyclic_gc_paused` disables the collector for its block (or decorated function) and enables it again
when the last block that paused it ends, if it was enabled before the first. Blocks may nest and may run
in several threads at once; the collector stays paused until none runs. The cycles a block makes (a few,
and the traceback of an error) are collected by the first collection after it. ``gc.freeze`` would spare
the import-time heap too, but only if called at the right moment in the process that runs the step, which
the library does not own. The standard library has no counted pause and no package we depend on provides
one, hence this module.
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
    """Run the block, or each call of the decorated function, with the cyclic garbage collector disabled
    (reference counting still frees objects); see the module docstring."""
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
