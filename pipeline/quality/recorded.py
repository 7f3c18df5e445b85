"""When a video clip was recorded, from what its file says.

A robot log carries its own clock (MCAP log times are nanoseconds since the epoch). A clip's timestamps
start at zero, so its wall-clock start comes from elsewhere, in this order: the container's
``creation_time`` tag (what cameras and phones write into the MP4 header), else the vendor file's
modification time (when it was written to the drop: close to the recording for a camera dump, and better
than nothing), else unknown. A clip must never be placed at 1970-01-01: a ``since`` filter would drop it
and every plot over time would span fifty years.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

#: Times before this are a muxer's zero (1904 or 1970 epochs written for "unknown"), not a recording.
EARLIEST_PLAUSIBLE = datetime(1995, 1, 1, tzinfo=UTC)
NS_PER_S = 1_000_000_000


class RecordedFrom(StrEnum):
    """Where a clip's start time came from (kept in the pre-gate's probe record)."""

    CONTAINER = "container_creation_time"
    FILE_MTIME = "file_mtime"
    UNKNOWN = "unknown"


def parse_creation_time(text: str | None) -> int | None:
    """``creation_time`` (ISO 8601 as FFmpeg prints it, ``2025-06-02T08:03:24.000000Z``) as epoch ns, or
    None when absent, unreadable or implausible."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return _plausible(when if when.tzinfo else when.replace(tzinfo=UTC))


def clip_start_ns(creation_time: str | None, file_mtime_s: float | None) -> tuple[int | None, RecordedFrom]:
    """The clip's recorded start as epoch ns, and where it came from (see the module doc)."""
    from_container = parse_creation_time(creation_time)
    if from_container is not None:
        return from_container, RecordedFrom.CONTAINER
    if file_mtime_s is not None:
        from_file = _plausible(datetime.fromtimestamp(file_mtime_s, UTC))
        if from_file is not None:
            return from_file, RecordedFrom.FILE_MTIME
    return None, RecordedFrom.UNKNOWN


def _plausible(when: datetime) -> int | None:
    if when < EARLIEST_PLAUSIBLE:
        return None
    return int(when.timestamp()) * NS_PER_S + when.microsecond * 1000
