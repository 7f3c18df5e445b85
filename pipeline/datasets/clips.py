"""A video episode's clips as manifest rows: their time windows, read from the transcode's ``clips.json``.

The catalog records each clip as a ``clip`` artifact (URI, sha256, size) but not where in the video it was
cut from or how long it is; the transcode lists that in ``clips.json`` beside the clips
(:mod:`pipeline.transcode.clips`: ``file``, ``index``, ``start_s``/``end_s`` in source time, ``frames``,
and the output ``fps``). A build reads the lists of the video episodes it selected, once each, and turns
every clip into one manifest row:

* ``uri``: the clip's MP4, ``start_ns`` = 0 and ``end_ns`` = its frames at its constant frame rate: the
  window on the clip file's own timeline (its first frame is at 0), so that ``start_ns`` .. ``end_ns``
  addresses the file at ``uri`` as it does for a robot episode's MCAP;
* ``clip_index``, ``source_start_ns``, ``source_end_ns``: which clip of the video it is and the part of the
  source video it was cut from (on the episode's clock: a video episode runs from 0 to its duration).

A list that does not name a recorded clip with the recorded sha256 stops the build: the catalog and the
store disagree, and a manifest must not point at bytes nobody checked.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipeline.datasets.errors import DatasetBuildError
from pipeline.errors import StoreError

if TYPE_CHECKING:
    from pipeline.store import Store

log = logging.getLogger(__name__)

#: Reads whole small files by URI: ``{uri: bytes}`` for every URI given.
DocumentReader = Callable[[Sequence[str]], dict[str, bytes]]

#: The columns :func:`clip_windows` returns, one row per clip listed.
CLIP_WINDOW_SCHEMA = pa.schema(
    [
        pa.field("clips_uri", pa.string(), nullable=False),
        pa.field("clip_file", pa.string(), nullable=False),
        pa.field("clip_index", pa.int32(), nullable=False),
        pa.field("listed_sha256", pa.string(), nullable=False),
        pa.field("duration_ns", pa.int64(), nullable=False),
        pa.field("source_start_ns", pa.int64(), nullable=False),
        pa.field("source_end_ns", pa.int64(), nullable=False),
    ]
)

_NS = 1_000_000_000


def store_reader(store: Store) -> DocumentReader:
    """A :data:`DocumentReader` over ``store``'s filesystem (URIs of another filesystem open on their own)."""
    import fsspec

    protocols = {store.fs.protocol} if isinstance(store.fs.protocol, str) else set(store.fs.protocol)

    def read(uris: Sequence[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        mine = [u for u in uris if fsspec.utils.get_protocol(u) in protocols]
        paths = {store.fs._strip_protocol(u): u for u in mine}
        try:
            if paths:
                # one call: object stores fetch the files concurrently
                for path, data in store.fs.cat(list(paths)).items():
                    out[paths[store.fs._strip_protocol(path)]] = data
            for uri in (u for u in uris if u not in out):
                with fsspec.open(uri, "rb") as f:
                    out[uri] = f.read()
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read a clip list from the store: {exc}") from exc
        return out

    return read


def clip_windows(dataset: str, documents: dict[str, bytes]) -> pa.Table:
    """One row per clip listed in the ``clips.json`` documents (by URI), with its windows in nanoseconds;
    ``dataset`` names the build in errors."""
    columns: dict[str, list[Any]] = {f.name: [] for f in CLIP_WINDOW_SCHEMA}
    for uri in sorted(documents):
        try:
            listed = json.loads(documents[uri])
            fps = Fraction(listed["fps"])
            clips = listed["clips"]
            rows = [
                (
                    str(c["file"]),
                    int(c["index"]),
                    str(c["sha256"]),
                    round(int(c["frames"]) * _NS / fps),
                    round(float(c["start_s"]) * _NS),
                    round(float(c["end_s"]) * _NS),
                )
                for c in clips
            ]
        except (ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
            raise DatasetBuildError(
                dataset, f"{uri} is not a clip list (clips.json with fps and clips): {exc!r}"
            ) from None
        for file, index, sha256, duration_ns, start_ns, end_ns in rows:
            columns["clips_uri"].append(uri)
            columns["clip_file"].append(file)
            columns["clip_index"].append(index)
            columns["listed_sha256"].append(sha256)
            columns["duration_ns"].append(duration_ns)
            columns["source_start_ns"].append(start_ns)
            columns["source_end_ns"].append(end_ns)
    return pa.table(columns, schema=CLIP_WINDOW_SCHEMA)
