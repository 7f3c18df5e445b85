"""``sluice synth robot|video``: writes the drop and prints what it made."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mcap.reader import make_reader
from typer.testing import CliRunner

from pipeline.cli.synth import app
from pipeline.errors import ConfigError, UnknownChoiceError
from pipeline.synth.drop import SizeError, parse_size
from pipeline.synth.generate import SynthError

runner = CliRunner(env={"COLUMNS": "200"})  # wide enough that rich does not fold file names


def test_robot_command(tmp_path: Path) -> None:
    out = tmp_path / "drop"
    args = ["robot", str(out), "--episodes", "1", "--seconds", "0.5", "--width", "64", "--height", "48"]
    result = runner.invoke(app, [*args, "--defect", "zero_bytes", "--defect", "crc_flipped", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "drop.json").read_text())
    assert [f["defect"] for f in manifest["files"]] == [None, "zero_bytes", "crc_flipped"]
    for f in manifest["files"]:
        assert f["path"] in result.output
    assert "crc_mismatch" in result.output and "3 files" in result.output


def test_robot_command_with_a_flavor(tmp_path: Path) -> None:
    out = tmp_path / "drop"
    args = ["robot", str(out), "--episodes", "1", "--seconds", "0.5", "--width", "64", "--height", "48"]
    flavor = ["--flavor", "ros2-raw", "--pixel-encoding", "bayer_rggb8"]
    result = runner.invoke(app, [*args, *flavor, "--defect", "corrupt_image", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "drop.json").read_text())
    assert [f["defect"] for f in manifest["files"]] == [None, "corrupt_image"]
    with open(out / manifest["files"][0]["path"], "rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None
    cameras = {
        c.topic: summary.schemas[c.schema_id].name for c in summary.channels.values() if "/cam/" in c.topic
    }
    assert cameras == {
        f"/cam/{n}/image_raw": "sensor_msgs/msg/Image" for n in ("front", "wrist_left", "wrist_right")
    }
    assert {c.message_encoding for c in summary.channels.values()} == {"cdr"}
    assert "decode_error" in result.output


def test_video_command(tmp_path: Path) -> None:
    out = tmp_path / "drop"
    args = [
        "video",
        str(out),
        "--clips",
        "1",
        "--seconds",
        "0.5",
        "--width",
        "64",
        "--height",
        "48",
        "--jobs",
        "1",
    ]
    result = runner.invoke(
        app, [*args, "--defect", "all_black", "--defect", "colour_change", "--no-sidecars"]
    )
    assert result.exit_code == 0, result.output
    assert "all_black" in result.output and "blank_video" in result.output
    # the table says which step finds a defect that ingest and the pre-gate pass
    assert "quarantined (colour_mismatch) at transcode" in " ".join(result.output.split())
    assert not list(out.glob("**/*.meta.json"))


def test_video_command_writes_bt709_footage_and_its_copies_say_so(tmp_path: Path) -> None:
    """``--colour bt709``: the clips (and a re-encoded copy) are tagged BT.709 limited range in the
    bitstream, as HD footage is; the default writes them untagged."""
    import av

    def tags(drop: Path) -> set[tuple[int, int, int, int]]:
        found = set()
        for clip in drop.rglob("*.mp4"):
            with av.open(str(clip)) as container:
                frame = next(container.decode(video=0))
            found.add((frame.colorspace, frame.color_primaries, frame.color_trc, frame.color_range))
        return found

    args = ["--clips", "1", "--seconds", "0.5", "--width", "64", "--height", "48", "--jobs", "1"]
    result = runner.invoke(
        app, ["video", str(tmp_path / "hd"), *args, "--colour", "bt709", "--defect", "reencoded"]
    )
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "hd").rglob("*.mp4"))) == 2 and tags(tmp_path / "hd") == {(1, 1, 1, 1)}
    assert runner.invoke(app, ["video", str(tmp_path / "sd"), *args]).exit_code == 0
    assert tags(tmp_path / "sd") == {(2, 2, 2, 0)}  # unspecified: read as BT.601
    result = runner.invoke(app, ["video", str(tmp_path / "x"), *args, "--colour", "bt2020"])
    assert isinstance(result.exception, ConfigError) and "'bt601' or 'bt709'" in str(result.exception)


def test_bad_options_name_the_allowed_values(tmp_path: Path) -> None:
    result = runner.invoke(app, ["robot", str(tmp_path / "a"), "--defect", "bogus"])
    assert isinstance(result.exception, UnknownChoiceError) and "truncated" in str(result.exception)
    result = runner.invoke(app, ["video", str(tmp_path / "b"), "--width", "100"])
    assert isinstance(result.exception, ConfigError) and "multiples of 8" in str(result.exception)
    result = runner.invoke(app, ["robot", str(tmp_path / "d"), "--flavor", "ros3-jpeg"])
    assert isinstance(result.exception, UnknownChoiceError) and "ros2-jpeg" in str(result.exception)
    result = runner.invoke(app, ["robot", str(tmp_path / "c"), "--size", "lots"])
    assert isinstance(result.exception, SizeError) and "GiB" in str(result.exception)
    for kind, option in (("robot", "--seconds"), ("video", "--fps")):
        result = runner.invoke(app, [kind, str(tmp_path / "e"), option, "nan"])
        assert isinstance(result.exception, ConfigError) and "finite number" in str(result.exception)


def test_parse_size() -> None:
    assert parse_size("2GB") == 2_000_000_000
    assert parse_size("500MiB") == 500 * 2**20
    assert parse_size("1.5kb") == 1500
    assert parse_size("1048576") == 1048576


#: Options that keep a drop's files small and quick.
SMALL = ["--seconds", "0.5", "--width", "64", "--height", "48", "--jobs", "1"]


@pytest.mark.parametrize(("kind", "count"), [("robot", "--episodes"), ("video", "--clips")])
def test_a_drop_that_would_hold_no_file_is_refused(tmp_path: Path, kind: str, count: str) -> None:
    out = tmp_path / "drop"
    result = runner.invoke(app, [kind, str(out), count, "0", *SMALL])
    assert isinstance(result.exception, SynthError), result.output
    assert f"the drop would hold no file: {count.removeprefix('--')} is 0" in str(result.exception)
    assert not out.exists()
    # defect files alone are a drop
    result = runner.invoke(app, [kind, str(out), count, "0", "--defect", "zero_bytes", *SMALL])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "drop.json").read_text())
    assert [f["defect"] for f in manifest["files"]] == ["zero_bytes"]


@pytest.mark.parametrize("kind", ["robot", "video"])
@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_are_refused(tmp_path: Path, kind: str, jobs: str) -> None:
    result = runner.invoke(app, [kind, str(tmp_path / "drop"), "--jobs", jobs])
    assert result.exit_code == 2 and "Invalid value for '--jobs'" in result.output, result.output
    assert not (tmp_path / "drop").exists()


@pytest.mark.parametrize("kind", ["robot", "video"])
def test_a_size_beyond_the_free_space_is_refused_before_writing(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "new" / "drop"
    target = 2 * shutil.disk_usage(tmp_path).free + 1
    result = runner.invoke(app, [kind, str(out), "--size", str(target), *SMALL])
    assert isinstance(result.exception, SynthError), result.output
    message = str(result.exception)
    assert f"target size {target:,} bytes" in message and f"free on the filesystem of {tmp_path}" in message
    assert not (tmp_path / "new").exists()
