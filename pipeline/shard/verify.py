"""Shard verification: a shard must match its member index and its catalog record, byte for byte.

One sequential pass hashes the whole file and, through the index's offsets, every member's data; a second,
cheap pass walks the tar headers (seeking over the data). A tar cut at a member boundary reads as a valid,
shorter archive in every tar reader, so the checks that catch it are the index's member list, the recorded
size and sha256, and the end-of-archive marker.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from pipeline.shard.format import FORMAT_VERSION, INDEX_SUFFIX, TAR_BLOCK

#: Read size of the verification pass.
READ_BLOCK_BYTES = 8 << 20


@dataclass(frozen=True)
class Member:
    """One tar member as the index records it."""

    name: str
    offset_data: int
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class ShardIndex:
    """The member index written beside a shard."""

    shard: str  # file name of the tar
    size_bytes: int
    sha256: str
    n_samples: int
    n_episodes: int
    members: tuple[Member, ...]
    format_version: int = FORMAT_VERSION

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format_version": self.format_version,
                "shard": self.shard,
                "size_bytes": self.size_bytes,
                "sha256": self.sha256,
                "n_samples": self.n_samples,
                "n_episodes": self.n_episodes,
                "members": [[m.name, m.offset_data, m.size_bytes, m.sha256] for m in self.members],
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ShardIndex:
        raw: dict[str, Any] = json.loads(data)
        return cls(
            shard=raw["shard"],
            size_bytes=int(raw["size_bytes"]),
            sha256=raw["sha256"],
            n_samples=int(raw["n_samples"]),
            n_episodes=int(raw["n_episodes"]),
            members=tuple(Member(str(n), int(o), int(s), str(h)) for n, o, s, h in raw["members"]),
            format_version=int(raw.get("format_version", 0)),
        )


@dataclass(frozen=True)
class Verification:
    """What verification found; ``ok`` when nothing."""

    shard: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def index_path(shard_path: str) -> str:
    return shard_path + INDEX_SUFFIX


def verify_file(
    fs: Any,
    path: str,
    index: ShardIndex,
    *,
    expected_sha256: str | None = None,
    expected_size_bytes: int | None = None,
    expected_samples: int | None = None,
) -> Verification:
    """Check the tar at ``path`` against ``index`` and, when given, the recorded sha256, size and count."""
    problems: list[str] = []
    if index.format_version != FORMAT_VERSION:
        problems.append(f"index format version {index.format_version}; this reader knows {FORMAT_VERSION}")
    for what, recorded, indexed in (
        ("sha256", expected_sha256, index.sha256),
        ("size_bytes", expected_size_bytes, index.size_bytes),
        ("n_samples", expected_samples, index.n_samples),
    ):
        if recorded is not None and recorded != indexed:
            problems.append(f"index {what} {indexed} differs from the recorded {recorded}")
    try:
        with fs.open(path, "rb") as fh:
            size, sha256, member_sha = _hash_pass(fh, index.members)
            fh.seek(0)
            headers = _header_pass(fh)
    except FileNotFoundError:
        return Verification(path, [*problems, "shard file is missing"])
    except (OSError, tarfile.TarError) as exc:
        return Verification(path, [*problems, f"cannot read the shard: {exc}"])
    if size != index.size_bytes:
        problems.append(f"size {size} bytes, indexed {index.size_bytes}")
    if sha256 != index.sha256:
        problems.append(f"sha256 {sha256}, indexed {index.sha256}")
    listed = [(m.name, m.offset_data, m.size_bytes) for m in index.members]
    if headers != listed:
        missing = [m[0] for m in listed if m not in headers]
        extra = [h[0] for h in headers if h not in listed]
        problems.append(
            f"tar holds {len(headers)} members, the index {len(listed)}; "
            f"missing {missing[:5]}{'…' if len(missing) > 5 else ''}, unexpected {extra[:5]}"
        )
    for member, digest in zip(index.members, member_sha, strict=True):
        if digest is not None and digest != member.sha256:
            problems.append(f"member {member.name}: sha256 {digest}, indexed {member.sha256}")
    if index.members:
        last = index.members[-1]
        end = last.offset_data + -(-last.size_bytes // TAR_BLOCK) * TAR_BLOCK
        if size < end + 2 * TAR_BLOCK:
            problems.append(f"no end-of-archive marker after byte {end} (file is {size} bytes)")
    keys = {m.name.split(".", 1)[0] for m in index.members}
    if len(keys) != index.n_samples:
        problems.append(f"index lists {len(keys)} sample keys, says n_samples {index.n_samples}")
    return Verification(path, problems)


def _hash_pass(fh: IO[bytes], members: Sequence[Member]) -> tuple[int, str, list[str | None]]:
    """Size and sha256 of the file, and each member's data sha256 (None where the file ends first)."""
    whole = hashlib.sha256()
    digests = [hashlib.sha256() for _ in members]
    done = [0] * len(members)
    pos = 0
    first = 0  # members before this one are fully hashed
    while block := fh.read(READ_BLOCK_BYTES):
        end = pos + len(block)
        whole.update(block)
        i = first
        while i < len(members) and members[i].offset_data < end:
            m = members[i]
            lo = max(m.offset_data, pos)
            hi = min(m.offset_data + m.size_bytes, end)
            if hi > lo:
                digests[i].update(block[lo - pos : hi - pos])
                done[i] += hi - lo
            if m.offset_data + m.size_bytes <= end and i == first:
                first += 1
            i += 1
        pos = end
    member_sha = [d.hexdigest() if done[i] == members[i].size_bytes else None for i, d in enumerate(digests)]
    return pos, whole.hexdigest(), member_sha


def _header_pass(fh: IO[bytes]) -> list[tuple[str, int, int]]:
    """(name, data offset, size) of every member, as a tar reader sees them."""
    with tarfile.open(fileobj=fh, mode="r:") as tar:
        return [(m.name, m.offset_data, m.size) for m in tar]
