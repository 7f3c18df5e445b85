"""The staging file's read-back check runs beside its hash and fsync; the check's verdict and the fsync's
error still decide, and a rejected file is not left behind."""

from __future__ import annotations

import errno
import hashlib
import threading
import time
from pathlib import Path

import pytest
from transcode_helpers import PROVENANCE, config_for

from pipeline.transcode import publish, robot
from pipeline.transcode.errors import OutputVerifyError, PublishError


def _staging(tmp_path: Path, size: int = 600_000) -> Path:
    path = tmp_path / ".episode.part"
    path.write_bytes(b"sluice" * (size // 6))
    return path


def test_the_hash_runs_while_the_check_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _staging(tmp_path)
    checking, hashed = threading.Event(), threading.Event()
    plain = publish.sha256_file
    hash_saw_check: list[bool] = []

    def sha256_file(p: Path) -> tuple[str, int]:
        # one before the other, the hash would never see the check running (or the check the hash done)
        hash_saw_check.append(checking.wait(timeout=10))
        found = plain(p)
        hashed.set()
        return found

    monkeypatch.setattr(publish, "sha256_file", sha256_file)
    check_saw_hash: list[bool] = []

    def check(p: Path) -> None:
        assert p == path
        checking.set()
        check_saw_hash.append(hashed.wait(timeout=10))

    digest, size = publish.verified_digest(path, check)
    assert hash_saw_check == [True] and check_saw_hash == [True]
    assert (digest, size) == (hashlib.sha256(path.read_bytes()).hexdigest(), 600_000)


def test_a_failed_check_is_raised_once_the_hash_has_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _staging(tmp_path, 1000)
    hashed = threading.Event()
    plain = publish.sha256_file

    def slow_sha256_file(p: Path) -> tuple[str, int]:
        time.sleep(0.3)
        found = plain(p)
        hashed.set()
        return found

    monkeypatch.setattr(publish, "sha256_file", slow_sha256_file)

    def check(p: Path) -> None:
        raise OutputVerifyError(str(p), "message counts differ")

    with pytest.raises(OutputVerifyError, match="message counts differ"):
        publish.verified_digest(path, check)
    assert hashed.is_set()  # nothing still reads the file the caller is about to remove


def test_a_failed_fsync_is_reported_by_this_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Linux reports a write-back error to the first fsync after it only: a later one would succeed
    path = _staging(tmp_path, 1000)

    def fsync_path(p: Path) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(publish, "fsync_path", fsync_path)
    with pytest.raises(PublishError, match=r"fsync: .*Input/output error"):
        publish.verified_digest(path, lambda p: None)


def test_a_transcode_whose_output_fails_its_check_leaves_no_staging_file(
    source_episode: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def verify_written(path: Path, counts: dict[str, int]) -> None:
        assert path.stat().st_size > 0
        raise OutputVerifyError(str(path), "message counts (read, written) differ")

    monkeypatch.setattr(robot, "verify_written", verify_written)
    out, staging = tmp_path / "out" / "episode.mcap", tmp_path / "staging"
    with pytest.raises(OutputVerifyError, match="message counts"):
        robot.transcode_episode(source_episode, out, config_for("vla"), PROVENANCE, staging_dir=staging)
    assert not out.exists()
    assert list(staging.iterdir()) == []
