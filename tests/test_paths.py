"""Output folders made, or refused in words (pipeline.paths): a file in the way, a filesystem that says no,
a folder this user cannot enter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.paths import make_folder, nearest_existing


def test_a_folder_is_made_and_a_file_in_the_way_is_named(tmp_path: Path) -> None:
    assert make_folder(tmp_path / "a" / "b") is None and (tmp_path / "a" / "b").is_dir()
    assert make_folder(tmp_path / "a") is None  # exists already
    (tmp_path / "afile").write_text("x")
    assert make_folder(tmp_path / "afile" / "sub") == f"{tmp_path / 'afile'} is a file, not a directory"
    assert nearest_existing(tmp_path / "afile" / "sub" / "deeper") == tmp_path / "afile"


def test_a_filesystem_that_refuses_is_named() -> None:
    assert (
        make_folder(Path("/proc/sluice-test/out"))
        == "the filesystem of /proc refused it (No such file or directory)"
    )


def test_a_folder_this_user_cannot_enter_is_a_reason_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    real_stat, real_mkdir = os.stat, os.mkdir

    def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if str(path).startswith(f"{locked}/"):  # what another user meets under a root-only folder
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    def mkdir(path: object, *args: object, **kwargs: object) -> None:
        if str(path).startswith(f"{locked}/"):
            raise PermissionError(13, "Permission denied", str(path))
        real_mkdir(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "mkdir", mkdir)
    with pytest.raises(PermissionError):
        (locked / "sub").exists()  # what Python 3.11's Path.exists does there
    assert nearest_existing(locked / "sub" / "out") == locked
    assert make_folder(locked / "sub" / "out") == f"the filesystem of {locked} refused it (Permission denied)"
