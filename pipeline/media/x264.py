"""What makes a libx264 or libx265 encode byte-identical from run to run, shared by the transcode and the
synthetic media generators.

* One thread. x264 derives some decisions from its thread count, which it otherwise takes from the
  machine's cores; with one thread the same frames and options give the same bytes on any machine with the
  same libx264 build. Parallelism comes from encoding cameras or episodes in separate processes, which
  MEASURED.md found faster anyway (186 vs 145 fps on two cores). x265 is held to the same rule: no thread
  pool (``pools=none``, which also turns wavefront rows off) and one frame thread.
* No macroblock tree, ever. The libx264 in the PyAV wheel reads memory it never wrote in its
  macroblock-tree pass. With B-frames under CRF, the same frames encoded in processes whose freed heap holds
  different bytes (glibc's ``MALLOC_PERTURB_`` set to 85, then 170) came out different, and in one process
  with other allocations in between 12 encodes of 224x176 frames gave 12 different files. Without B-frames
  (the ``vla`` profile) it is rarer but there: one encoder process transcoding the same episode 16 times,
  with another episode in between each time, gave a different camera stream (from its first frame on) in
  2 of the 16, and never with ``mbtree=0`` (48 of 48 identical). A constant QP turns the tree off itself.
  x265's equivalent pass (``cutree``) is turned off when there are B-frames; without them the same 16-run
  check came out identical, so it stays on there.
  ``tests/transcode/test_transcode_determinism.py`` holds every encoder to it, in fresh processes under two
  heap fill bytes and in one reused encoder pool.
"""

from __future__ import annotations

#: libx264 threads per encoder (see the module docstring).
X264_THREADS = 1


#: x264 parameters every encode needs to give the same bytes on every run (see the module docstring).
X264_DETERMINISTIC_PARAMS: tuple[str, ...] = ("mbtree=0",)


def x265_deterministic_params(bframes: int) -> list[str]:
    """x265 parameters for the same bytes on every run: single-threaded, and no cutree with B-frames.
    ``log-level=error`` keeps x265's per-encode banner off stderr (it prints it at ``info``)."""
    params = ["pools=none", "frame-threads=1", "log-level=error"]
    return params + (["cutree=0"] if bframes > 0 else [])
