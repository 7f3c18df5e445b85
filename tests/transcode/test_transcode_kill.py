"""Kill -9 during a transcode, rerun: no partial output is ever visible, the rerun's bytes are identical."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from transcode_helpers import PROVENANCE, config_for

from pipeline.transcode import TranscodeResult, transcode_episode

REPO_ROOT = Path(__file__).resolve().parents[2]

# The child transcodes for real; at the chosen point it writes a marker file and waits to be killed.
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {helpers!r})
    from transcode_helpers import PROVENANCE, config_for
    import pipeline.transcode.robot as robot

    source, out, staging, marker, point = sys.argv[1:6]

    def hold(*args, **kwargs):
        Path(marker).write_text("here")
        time.sleep(600)

    if point == "publish":  # the staging file is complete and verified, not yet renamed
        robot.publish = hold
    else:  # mid-write: the staging file is open and partly written
        original = robot._write_metadata
        def write_then_hold(*args, **kwargs):
            original(*args, **kwargs)
            hold()
        robot._write_metadata = write_then_hold
    robot.transcode_episode(Path(source), Path(out), config_for("vla"), PROVENANCE, staging_dir=Path(staging))
    """
)


def _kill_at(point: str, source: Path, out: Path, staging: Path, tmp_path: Path) -> None:
    marker = tmp_path / f"marker-{point}"
    script = CHILD.format(helpers=str(Path(__file__).parent))
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(source), str(out), str(staging), str(marker), point],
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            if child.poll() is not None:
                pytest.fail(f"child exited early: {child.stderr.read().decode() if child.stderr else ''}")
            if time.monotonic() > deadline:
                pytest.fail("child never reached the kill point")
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize("point", ["mid_write", "publish"])
def test_kill_minus_nine_leaves_no_partial_output_and_the_rerun_is_byte_identical(
    point: str, source_episode: Path, transcoded: Callable[[str], TranscodeResult], tmp_path: Path
) -> None:
    out = tmp_path / "derived" / "episode.mcap"
    staging = tmp_path / "tmp"
    _kill_at(point, source_episode, out, staging, tmp_path)
    assert not out.exists()
    assert not out.parent.exists() or not any(
        out.parent.iterdir()
    )  # nothing visible under the output's folder
    leftovers = list(staging.glob(".episode.mcap.*.part"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # the orphan stays in the staging area

    rerun = transcode_episode(source_episode, out, config_for("vla"), PROVENANCE, staging_dir=staging)
    reference = transcoded("vla")  # an uninterrupted run of the same input and config
    assert out.read_bytes() == reference.path.read_bytes()
    assert rerun.sha256 == reference.sha256
