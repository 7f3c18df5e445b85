"""The ingest command line, end to end against the real catalog: ingest, files list, quarantine, scrub."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.synth import RobotDropConfig, make_robot_drop

pytestmark = pytest.mark.integration


def _run(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Exit code and stdout (progress goes to stderr: --json output must parse whole)."""
    result = CliRunner().invoke(app, args, env=env, catch_exceptions=False)
    return result.exit_code, result.stdout


def test_ingest_list_quarantine_and_scrub(tmp_path: Path, migrated_database_url: str) -> None:
    drop = tmp_path / "drop"
    manifest = make_robot_drop(
        drop,
        RobotDropConfig(episodes=1, seconds=1, width=64, height=48, defects=("crc_flipped", "duplicate")),
    )
    env = {"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DATABASE_URL": migrated_database_url}

    code, out = _run(
        ["ingest", str(drop), "--kind", "mcap", "--include", "*.mcap", "--settle-s", "0", "--json"], env
    )
    assert code == 0, out
    report = json.loads(out)  # stdout is the JSON and nothing else
    assert report["discovered"] == len(manifest.files)
    code, out = _run(["ingest", str(drop), "--kind", "mcap", "--include", "*.mcap", "--settle-s", "0"], env)
    assert code == 0, out
    assert "now 1 accepted, 1 duplicate, 1 quarantined" in out, out  # where the files ended, duplicates too

    code, out = _run(["files", "list", "--json"], env)
    assert code == 0
    records = {r["path"]: r for r in json.loads(out)}
    assert set(records) == {f.path for f in manifest.files}
    for f in manifest.files:
        record = records[f.path]
        assert {"path", "sha256", "state", "reasons", "duplicate_of"} <= set(record)
        assert record["sha256"] == f.sha256
        if f.defect == "crc_flipped":
            assert (record["state"], record["reasons"]) == ("quarantined", ["crc_mismatch"])
        if f.defect == "duplicate":
            assert record["state"] == "duplicate" and record["duplicate_of"] == f.duplicate_of
            original = records[f.duplicate_of]
            assert (record["duplicate_of_vendor"], record["duplicate_of_episode"]) == (
                original["vendor"],
                original["episode_id"],
            )
            code, table = _run(["files", "list", "--state", "duplicate"], env)
            assert f"{f.duplicate_of} (episode {original['episode_id']})" in table, table

    code, out = _run(["quarantine", "list", "--json"], env)
    quarantined = json.loads(out)
    assert [q["path"] for q in quarantined] == [f.path for f in manifest.files if f.defect == "crc_flipped"]
    assert quarantined[0]["failed_checks"] and "CRC" in quarantined[0]["failed_checks"][0]["detail"]
    code, out = _run(["quarantine", "list"], env)
    check = quarantined[0]["failed_checks"][0]
    assert f"  - {check['check']} [failed]: " in out  # shown as text: rich took "[failed]" for markup

    code, out = _run(["scrub", "--json"], env)
    assert code == 0 and json.loads(out)["findings"] == []

    # flip one bit of one stored raw object: scrub must name it and fail
    victim = next(f for f in manifest.files if f.defect is None)
    raw = tmp_path / "home" / "store" / "raw" / victim.sha256
    os.chmod(raw, 0o644)
    data = bytearray(raw.read_bytes())
    data[len(data) // 2] ^= 0x10
    raw.write_bytes(bytes(data))
    code, out = _run(["scrub", "--json"], env)
    assert code == 1
    assert [(f["sha256"], f["problem"]) for f in json.loads(out)["findings"]] == [(victim.sha256, "hash")]


def test_the_ray_executor_without_a_cluster_is_a_clear_error(
    tmp_path: Path, migrated_database_url: str
) -> None:
    """SLUICE_RAY_ADDRESS unset means no Ray for the CLI as for DAG runs: asking for Ray says what to set."""
    import subprocess
    import sys

    make_robot_drop(tmp_path / "drop", RobotDropConfig(episodes=1, seconds=1, width=64, height=48))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env |= {"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DATABASE_URL": migrated_database_url}
    sluice = Path(sys.executable).with_name("sluice")
    done = subprocess.run(
        [
            str(sluice),
            "ingest",
            str(tmp_path / "drop"),
            "--kind",
            "mcap",
            "--settle-s",
            "0",
            "--executor",
            "ray",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "the ray executor needs a Ray cluster" in " ".join(done.stderr.split())


def test_an_ad_hoc_url_written_wrong_is_said_as_such(tmp_path: Path) -> None:
    """`s3:/bucket` was folded by a Path argument into a local folder `<cwd>/s3:/bucket` and reported as a
    missing source folder; `s3://` alone got as far as s3fs's "Cannot traverse all of S3"."""
    env = {"SLUICE_HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(app, ["ingest", "s3:/drops/acme", "--kind", "mcap"], env=env)
    assert result.exit_code == 2 and "'s3:/drops/acme' is not a URL: write s3://drops/acme" in " ".join(
        result.output.replace("│", " ").split()
    ), result.output
    result = CliRunner().invoke(app, ["ingest", "s3://", "--kind", "mcap"], env=env)
    assert result.exit_code == 2 and "names no bucket or host" in result.output, result.output
    assert not (tmp_path / "home").exists()  # refused before the catalog or the store was touched


def test_the_ray_executor_with_no_head_at_the_address_fails_within_seconds(
    tmp_path: Path, migrated_database_url: str
) -> None:
    """A head that is gone (killed, never started) is one clean error naming the address and what to do,
    not ``ray.init`` retrying for 10+ minutes."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as sock:  # a local port nothing listens on
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    make_robot_drop(tmp_path / "drop", RobotDropConfig(episodes=1, seconds=1, width=64, height=48))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env |= {
        "SLUICE_HOME": str(tmp_path / "home"),
        "SLUICE_DATABASE_URL": migrated_database_url,
        "SLUICE_RAY_ADDRESS": address,
    }
    sluice = Path(sys.executable).with_name("sluice")
    started = time.monotonic()
    argv = [str(sluice), "ingest", str(tmp_path / "drop"), "--kind", "mcap", "--settle-s", "0"]
    done = subprocess.run(
        [*argv, "--executor", "ray"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert f"error: no Ray head answers at SLUICE_RAY_ADDRESS={address}" in message, message
    assert "`sluice services up ray`" in message, message
    assert elapsed < 120, elapsed  # the command's own start-up and discovery; the connect takes < 5 s
