"""Reading samples out of a shard, as WebDataset groups them: consecutive members sharing a key.

Every member is checked against the member index beside the shard as it is read: a tar cut at a member
boundary reads as a valid, shorter archive in every tar reader (see :mod:`pipeline.shard.format`), so without
the index a reader would hand out fewer samples, or a sample short of a member, as if nothing were wrong.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Iterator

import fsspec

from pipeline.shard.errors import ShardVerifyError
from pipeline.shard.format import FORMAT_VERSION
from pipeline.shard.verify import ShardIndex, index_path


def iter_samples(uri: str) -> Iterator[tuple[str, dict[str, bytes]]]:
    """``(key, {extension: bytes})`` per sample of the shard at ``uri``, in order.

    Each member must be the next one the shard's member index lists (name, size and sha256), and the tar
    must hold all of them: a shard or index that is missing, unreadable, cut short or changed raises
    :class:`ShardVerifyError` naming the shard (after the samples read before the damage).
    """
    fs, path = fsspec.core.url_to_fs(uri)
    index = _read_index(fs, path, uri)
    members = index.members
    count = 0
    try:
        with fs.open(path, "rb") as fh, tarfile.open(fileobj=fh, mode="r:") as tar:
            key: str | None = None
            sample: dict[str, bytes] = {}
            for member in tar:
                listed = members[count] if count < len(members) else None
                if listed is None or (member.name, member.size) != (listed.name, listed.size_bytes):
                    expected = (
                        "nothing more" if listed is None else f"{listed.name} ({listed.size_bytes} bytes)"
                    )
                    raise ShardVerifyError(
                        uri,
                        [
                            f"member {count} is {member.name} ({member.size} bytes), the index lists {expected}"
                        ],
                    )
                extracted = tar.extractfile(member)
                data = extracted.read() if extracted is not None else b""
                if hashlib.sha256(data).hexdigest() != listed.sha256:
                    raise ShardVerifyError(uri, [f"member {member.name} does not hash to its indexed sha256"])
                count += 1
                name_key, _, ext = member.name.partition(".")
                if key is not None and name_key != key:
                    yield key, sample
                    sample = {}
                key = name_key
                sample[ext] = data
    except FileNotFoundError:
        raise ShardVerifyError(uri, ["shard file is missing"]) from None
    except (OSError, tarfile.TarError) as exc:
        raise ShardVerifyError(uri, [f"cannot read the shard after {count} members: {exc}"]) from exc
    if count < len(members):
        raise ShardVerifyError(
            uri, [f"the tar ends after {count} of the {len(members)} members its index lists (cut short?)"]
        )
    if key is not None:
        yield key, sample


def _read_index(fs: fsspec.AbstractFileSystem, path: str, uri: str) -> ShardIndex:
    try:
        index = ShardIndex.from_json(fs.cat_file(index_path(path)))
    except FileNotFoundError:
        raise ShardVerifyError(uri, ["member index is missing"]) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ShardVerifyError(uri, [f"member index is unreadable: {exc!r}"]) from exc
    if index.format_version != FORMAT_VERSION:
        raise ShardVerifyError(
            uri, [f"index format version {index.format_version}; this reader knows {FORMAT_VERSION}"]
        )
    return index
