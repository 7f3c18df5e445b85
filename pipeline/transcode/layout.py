"""The on-disk layout of a transcoded episode: topic groups, topic names and metadata record names.

One MCAP per episode, viewable as is in Foxglove. Channels belong to one of three topic groups, and no chunk
ever holds channels of two groups; each group's chunks are contiguous in the file and in time order (topics
interleaved time-major inside them), in :data:`FILE_ORDER`:

* ``cameras`` – every camera's ``foxglove.CompressedVideo`` stream, interleaved time-major, chunks cut at
  GOP boundaries (a sample's frames of all cameras are then one contiguous byte range);
* ``proprio`` – state and actions resampled to the profile's fixed rate (what a training sample reads);
* ``native`` – the source's state, action, calibration and other streams at their native rates, unchanged.

The group of a channel is in its MCAP channel metadata under :data:`GROUP_KEY`.
"""

from __future__ import annotations

from typing import Final

GROUP_CAMERAS: Final = "cameras"
GROUP_PROPRIO: Final = "proprio"
GROUP_NATIVE: Final = "native"
GROUPS: Final = (GROUP_CAMERAS, GROUP_PROPRIO, GROUP_NATIVE)
#: Order of the groups in the file. A group's chunks are kept together so that a window that spans two of
#: them is one contiguous read; the small proprio group comes first, the archive copies last.
FILE_ORDER: Final = (GROUP_PROPRIO, GROUP_CAMERAS, GROUP_NATIVE)

#: Channel metadata keys.
GROUP_KEY: Final = "sluice.group"
SOURCE_TOPIC_KEY: Final = "sluice.source_topic"
RESAMPLE_RATE_KEY: Final = "sluice.resample_rate_hz"
INTERPOLATION_KEY: Final = "sluice.interpolation"
#: JSON list of the entry names of a resampled stream's vectors (``JointState.name``), when it has them.
NAMES_KEY: Final = "sluice.names"

#: Every resampled record's time, exactly, as ``{"sec": s, "nsec": n}`` (Foxglove's JSON time). A JSON
#: reader whose numbers are doubles (JavaScript's ``JSON.parse``) rounds integers above 2^53 (9.0e15),
#: and ns since the epoch are 1.7e18: ``stamp_ns`` read there may be off by up to 128 ns; sec and nsec
#: are both below 2^32. The MCAP log and publish times (uint64 records) carry the same instant.
RESAMPLED_TIME_KEY: Final = "sluice_stamp"
#: The integer-ns stamp a resampled record gets when its source record had no stamp field of its own.
RESAMPLED_STAMP_KEY: Final = "stamp_ns"
#: Schema name prefix of the JSON records a non-JSON (CDR, protobuf) source's stream is resampled into.
RESAMPLED_SCHEMA_PREFIX: Final = "sluice.resampled/"

#: Resampled streams live beside the native ones: ``/robot/joint_states`` -> ``/robot/joint_states/resampled``.
RESAMPLED_SUFFIX: Final = "/resampled"

#: Metadata records (string -> string maps).
EPISODE_METADATA: Final = "episode"  # copied from the source log when it has one
TRANSCODE_METADATA: Final = "sluice.transcode"  # provenance and encoder settings
FRAMES_METADATA: Final = "sluice.frames"  # per camera: frame types and presentation stamps, decode order

#: The file name of a transcoded episode inside ``derived/transcode/<config hash>/<episode>/``.
EPISODE_FILE: Final = "episode.mcap"
#: Written beside an output the post-gate refused; its presence means "do not use".
QUARANTINE_FILE: Final = "QUARANTINED.json"

#: Library string written into the MCAP header.
LIBRARY: Final = "sluice-transcode"


def resampled_topic(source_topic: str) -> str:
    """The topic of the fixed-rate copy of ``source_topic``."""
    return source_topic.rstrip("/") + RESAMPLED_SUFFIX
