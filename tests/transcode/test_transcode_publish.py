"""The staging file's read-back check, hash and early sync overlap; the check's verdict still decides."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from pipeline.transcode import publish
from pipeline.transcode.errors import OutputVerifyError


def test_the_digest_is_taken_while_the_check_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / ".episode.part"
    path.write_bytes(b"sluice" * 100_000)
    hashed = threading.Event()
    plain = publish.sha256_file

    def sha256_file(p: Path) -> tuple[str, int]:
        found = plain(p)
        hashed.set()
        return found

    monkeypatch.setattr(publish, "sha256_file", sha256_file)
    seen_during_check: list[bool] = []

    def check(p: Path) -> None:
        assert p == path
        # one after the other, the hash would start only once this returned
        seen_during_check.append(hashed.wait(timeout=30))

    digest, size = publish.verified_digest(path, check)
    assert seen_during_check == [True]
    assert (digest, size) == (hashlib.sha256(path.read_bytes()).hexdigest(), 600_000)


def test_a_failed_check_is_raised_after_the_hash_has_ended(tmp_path: Path) -> None:
    path = tmp_path / ".episode.part"
    path.write_bytes(b"x" * 1000)

    def check(p: Path) -> None:
        raise OutputVerifyError(str(p), "message counts differ")

    with pytest.raises(OutputVerifyError, match="message counts differ"):
        publish.verified_digest(path, check)
    assert not [t for t in threading.enumerate() if t.name.startswith("publish")]
