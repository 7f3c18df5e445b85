"""Where each split's rows are in a manifest: one contiguous ``[start, stop)`` range per split.

The dataset builder orders rows train, then val, then eval, so each split is one range. The writer records
those ranges in the schema metadata under :data:`SPLIT_ROWS_KEY` (``{"eval": [860, 905], "train": [0, 812],
"val": [812, 860]}``) when every split is contiguous, so that a rank finds its split's rows by arithmetic.
A file without the key (written before it existed, or by another writer) has its ``split`` column scanned
instead: run-length encoded per record batch, which stops at the first batch showing a split in pieces.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from itertools import pairwise

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.enums import Split

log = logging.getLogger(__name__)

#: Schema metadata key of the split ranges (JSON object: split -> [start, stop]).
SPLIT_ROWS_KEY = b"sluice.manifest.split_rows"

SplitRanges = dict[str, tuple[int, int]]


def split_ranges(chunks: Iterable[pa.Array]) -> SplitRanges | None:
    """Each split's rows ``[start, stop)`` over the concatenated ``chunks`` of a ``split`` column.

    Returns None as soon as a split shows up in two places (its rows are not one range). Splits that never
    occur get an empty range where they would sit in train, val, eval order, so that every :class:`Split`
    has a range.
    """
    runs: list[tuple[str, int, int]] = []
    offset = 0
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        encoded = pc.run_end_encode(chunk)
        # More runs in one chunk than there are split values: some split is in pieces. Stop before turning
        # what may be millions of runs into Python objects.
        if len(encoded.values) > len(Split):
            return None
        start = 0
        for value, end in zip(encoded.values.to_pylist(), encoded.run_ends.to_pylist(), strict=True):
            if runs and runs[-1][0] == value and runs[-1][2] == offset + start:
                runs[-1] = (value, runs[-1][1], offset + end)
            else:
                runs.append((value, offset + start, offset + end))
            start = end
        offset += len(chunk)
    found: SplitRanges = {}
    for value, start, stop in runs:
        if value in found:
            return None
        found[value] = (start, stop)
    position = 0
    for split in Split:
        if split.value in found:
            position = found[split.value][1]
        else:
            found[split.value] = (position, position)
    return found


def split_range(chunks: Iterable[pa.Array], split: str) -> tuple[int, int] | None:
    """The rows ``[start, stop)`` of one ``split`` over the concatenated ``chunks`` of a ``split`` column:
    ``(0, 0)`` when it has no rows, None when its rows are not one range. Other splits may be in pieces."""
    found: tuple[int, int] | None = None
    offset = 0
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        encoded = pc.run_end_encode(chunk)
        # numpy, not pc.equal with a Python scalar: making an Arrow scalar imports pandas (a second or more)
        values = encoded.values.to_numpy(zero_copy_only=False)
        ends = encoded.run_ends.to_numpy()
        for k in (values == split).nonzero()[0]:
            start = offset + (int(ends[k - 1]) if k else 0)
            stop = offset + int(ends[k])
            if found is None:
                found = (start, stop)
            elif found[1] == start:  # the same run, continued in the next chunk
                found = (found[0], stop)
            else:
                return None
        offset += len(chunk)
    return found or (0, 0)


def encode_split_ranges(ranges: SplitRanges) -> bytes:
    """The metadata value for ``ranges``: compact, key-sorted JSON (the same ranges give the same bytes)."""
    return json.dumps(
        {name: [start, stop] for name, (start, stop) in ranges.items()}, sort_keys=True, separators=(",", ":")
    ).encode()


def decode_split_ranges(value: bytes, total_rows: int) -> SplitRanges | None:
    """The ranges recorded in a file of ``total_rows`` rows, or None when they are unreadable or impossible
    (out of bounds, overlapping, or not adding up to the file's rows)."""
    try:
        raw = json.loads(value)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    ranges: SplitRanges = {}
    for name, pair in raw.items():
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
            or not 0 <= pair[0] <= pair[1] <= total_rows
        ):
            return None
        ranges[str(name)] = (pair[0], pair[1])
    filled = sorted(r for r in ranges.values() if r[1] > r[0])
    if any(a[1] > b[0] for a, b in pairwise(filled)):
        return None
    if sum(stop - start for start, stop in filled) != total_rows:
        return None
    return ranges
