"""Discovery: globs, symlinks out of the root, files still being written, odd names."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import fsspec
import pytest

from pipeline.discover import discover, glob_match

LOCAL = fsspec.filesystem("file")


@pytest.mark.parametrize(
    ("path", "pattern", "expected"),
    [
        ("a.mcap", "*.mcap", True),
        ("x/y/a.mcap", "*.mcap", True),
        ("x/y/a.mcap", "**/*.mcap", True),
        ("a.mcap", "**/*.mcap", True),
        ("x/a.mcap", "x/*.mcap", True),
        ("y/x/a.mcap", "x/*.mcap", False),
        ("x/y/a.mcap", "x/*.mcap", False),
        ("a.mcap.part", "*.mcap", False),
        ("drop.json", "*.mcap", False),
        ("a1.mp4", "a[0-9].mp4", True),
    ],
)
def test_glob_semantics(path: str, pattern: str, expected: bool) -> None:
    assert glob_match(path, pattern) is expected


def test_selects_by_globs_and_refuses_symlinks_out_of_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "vendor", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.mcap").write_bytes(b"s")
    (root / "a.mcap").write_bytes(b"aa")
    (root / "sub" / "b.mcap").write_bytes(b"b")
    (root / "notes.txt").write_bytes(b"n")
    (root / "skip.tmp.mcap").write_bytes(b"t")
    odd = "-dash\nnewline ü.mcap"
    (root / odd).write_bytes(b"odd")
    (root / "escape.mcap").symlink_to(outside / "secret.mcap")
    (root / "linked_dir").symlink_to(outside, target_is_directory=True)
    (root / "inside_link.mcap").symlink_to(root / "a.mcap")

    found = discover(LOCAL, str(root), include=["*.mcap"], exclude=["*.tmp.mcap"], settle_s=0.05)
    paths = sorted(c.path for c in found.candidates)
    assert paths == sorted(["a.mcap", "sub/b.mcap", odd, "inside_link.mcap"])
    over = {p.path: p.why for p in found.passed_over}
    assert over == {"escape.mcap": "outside_root"}
    assert all("secret" not in c.full_path for c in found.candidates)


def test_a_file_still_being_written_is_passed_over(tmp_path: Path) -> None:
    root = tmp_path / "vendor"
    root.mkdir()
    (root / "done.mcap").write_bytes(b"x" * 10)
    growing = root / "growing.mcap"
    growing.write_bytes(b"")
    stop = threading.Event()

    def writer() -> None:
        with growing.open("ab") as f:
            while not stop.is_set():
                f.write(b"y" * 100)
                f.flush()
                time.sleep(0.01)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        found = discover(LOCAL, str(root), include=["*.mcap"], settle_s=0.3)
    finally:
        stop.set()
        thread.join()
    assert [c.path for c in found.candidates] == ["done.mcap"]
    assert [(p.path, p.why) for p in found.passed_over] == [("growing.mcap", "not_ready")]


def test_ready_marker_skips_the_second_look(tmp_path: Path) -> None:
    root = tmp_path / "vendor"
    (root / "batch1").mkdir(parents=True)
    (root / "batch1" / "a.mcap").write_bytes(b"a")
    (root / "batch1" / "_READY").write_bytes(b"")
    (root / "batch2").mkdir()
    (root / "batch2" / "b.mcap").write_bytes(b"b")
    os.utime(root / "batch2" / "b.mcap")
    started = time.monotonic()
    found = discover(LOCAL, str(root), include=["*.mcap"], ready_marker="_READY", settle_s=0.2)
    assert time.monotonic() - started >= 0.2  # batch2 has no marker: it needed the second look
    assert sorted(c.path for c in found.candidates) == ["batch1/a.mcap", "batch2/b.mcap"]
    assert all(c.path != "batch1/_READY" for c in found.candidates)


def test_a_missing_root_is_an_error_not_an_empty_listing(tmp_path: Path) -> None:
    from pipeline.discover import SourceMissingError

    with pytest.raises(SourceMissingError, match="does not exist"):
        discover(LOCAL, str(tmp_path / "no_such_drop"), settle_s=0)
    (tmp_path / "a_file").write_bytes(b"x")
    with pytest.raises(SourceMissingError, match="a_file is a file, not a folder"):
        discover(LOCAL, str(tmp_path / "a_file"), settle_s=0)
    (tmp_path / "empty").mkdir()
    assert discover(LOCAL, str(tmp_path / "empty"), settle_s=0).candidates == []


class _Failing(fsspec.implementations.local.LocalFileSystem):
    """A local filesystem whose listing of one folder fails as a client can (permission, a vanished folder)."""

    cachable = False

    def __init__(self, folder: str, error: OSError) -> None:
        super().__init__()
        self.folder, self.error = folder, error

    def ls(self, path: str, detail: bool = False, **kwargs: object) -> list:  # type: ignore[override,type-arg]
        if path.rstrip("/") == self.folder:
            raise self.error
        return super().ls(path, detail=detail, **kwargs)


def test_a_folder_that_cannot_be_listed_fails_discovery_and_a_vanished_one_is_passed(tmp_path: Path) -> None:
    from pipeline.discover import SourceUnreachableError

    for name in ("a/x.mcap", "locked/y.mcap"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    locked = str(tmp_path / "locked")
    # fsspec's walk would omit the folder and its files without a word: the run must not end green without them
    refused = _Failing(locked, PermissionError(13, "Permission denied", locked))
    with pytest.raises(SourceUnreachableError, match=r"PermissionError: .*Permission denied"):
        discover(refused, str(tmp_path), settle_s=0)
    # a folder deleted between the listing of its parent and its own: what it held was in flux
    gone = _Failing(locked, FileNotFoundError(2, "No such file or directory", locked))
    assert [c.path for c in discover(gone, str(tmp_path), settle_s=0).candidates] == ["a/x.mcap"]


def test_a_client_bug_is_not_called_an_unreachable_source(tmp_path: Path) -> None:
    class Broken(fsspec.implementations.local.LocalFileSystem):
        cachable = False

        def isdir(self, path: str) -> bool:
            raise TypeError("unexpected keyword argument 'regoin'")  # a typo in storage_options, say

    with pytest.raises(TypeError, match="regoin"):
        discover(Broken(), str(tmp_path), settle_s=0)
