"""The on-disk format of a shard: WebDataset tar files with a member index beside each.

A shard is a POSIX tar (PAX) whose members are grouped into samples by key (the name up to the first dot),
as WebDataset reads them. One sample is one artifact a dataset version's manifest rows point at: a robot
episode's transcoded MCAP, or one clip of a video episode (a video's manifest has a row per clip):

* ``<key>.json`` – the manifest rows of that artifact (its time windows), the episode id, the sha256 of the
  raw source, the artifact's URI and sha256: enough to trace the sample to the raw file, the code and the
  config that made it. URIs are keys relative to the store (``derived/transcode/...``), so that a copy of
  the store elsewhere (another bucket, a node's local disk) reads the same shards;
* ``<key>.<ext>`` – the artifact's bytes (``.mcap`` for a transcoded episode, ``.mp4`` for a clip).

Keys are ``e<episode id>-<source sha256>`` for an episode and ``e<episode id>-<source sha256>-c<clip
index>`` for a clip: unique per sample, stable across versions, and they carry the lineage in the name.
Members are written deterministically (mtime 0, uid/gid 0, mode 0444, no user names), so the same rows give
byte-identical shards and a re-run after a crash writes the same file again.

Beside ``shard-NNNNNN.tar`` lies ``shard-NNNNNN.tar.index.json``: every member's name, data offset, size and
sha256. Verification compares a shard with its index, because a tar cut exactly at a member boundary still
reads as a valid, shorter tar in every tar reader.
"""

from __future__ import annotations

import re
from typing import Final

#: Bumped when a reader of an older version could misread shards.
FORMAT_VERSION: Final = 1
SHARD_PATTERN: Final = "shard-{index:06d}.tar"
INDEX_SUFFIX: Final = ".index.json"
#: Tar blocks are 512 bytes; a member costs its header block plus its data rounded up to a block.
TAR_BLOCK: Final = 512
#: Two zero blocks end an archive; tarfile pads the file to a multiple of 20 blocks (its record size).
TAR_RECORD: Final = 20 * TAR_BLOCK
#: Episodes and splits with no shards of a dataset version live under these names.
EPISODE_SHARDS_DATASET: Final = "_episodes"
SAMPLE_JSON: Final = "json"

_KEY = re.compile(r"^e(\d+)-([0-9a-f]{64})(?:-c(\d+))?$")


def sample_key(episode_id: int | str, source_sha256: str, clip_index: int | None = None) -> str:
    """The WebDataset key of a sample: ``e<episode id>-<source sha256>[-c<clip index>]`` (no dots)."""
    key = f"e{int(episode_id)}-{source_sha256}"
    return key if clip_index is None else f"{key}-c{int(clip_index):03d}"


def parse_sample_key(key: str) -> tuple[int, str]:
    """(episode id, source sha256) of a sample key; ValueError naming the expected form otherwise."""
    match = _KEY.match(key)
    if match is None:
        raise ValueError(
            f"sample key {key!r} is not of the form e<episode id>-<64 hex digits>[-c<clip index>]"
        )
    return int(match.group(1)), match.group(2)


def member_bytes(size_bytes: int) -> int:
    """Bytes a member of ``size_bytes`` takes in a tar without long-name headers."""
    return TAR_BLOCK + -(-size_bytes // TAR_BLOCK) * TAR_BLOCK


def shard_dir(dataset: str, version: str) -> str:
    """Store key of a dataset version's shard folder."""
    return f"shards/{dataset}/{version}"
