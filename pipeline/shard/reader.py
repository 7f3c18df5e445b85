"""Reading samples out of a shard, as WebDataset groups them: consecutive members sharing a key."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator

import fsspec


def iter_samples(uri: str) -> Iterator[tuple[str, dict[str, bytes]]]:
    """``(key, {extension: bytes})`` per sample of the shard at ``uri``, in order."""
    fs, path = fsspec.core.url_to_fs(uri)
    with fs.open(path, "rb") as fh, tarfile.open(fileobj=fh, mode="r:") as tar:
        key: str | None = None
        sample: dict[str, bytes] = {}
        for member in tar:
            name_key, _, ext = member.name.partition(".")
            if key is not None and name_key != key:
                yield key, sample
                sample = {}
            key = name_key
            data = tar.extractfile(member)
            sample[ext] = data.read() if data is not None else b""
        if key is not None:
            yield key, sample
