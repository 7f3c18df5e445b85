"""``sluice ops`` on this machine: the real commands run (df), the config file is the real loader's."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli.ops import app
from pipeline.errors import ConfigError
from pipeline.ops import load_ops_config


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ops.yaml"
    path.write_text(text)
    return path


#: ``scontrol show node cpu01`` of a node Slurm drained for a transient reason.
DRAINED_CPU01 = (
    "NodeName=cpu01 Arch=x86_64 CoresPerSocket=1\n"
    "   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1\n"
    "   Reason=Kill task failed [slurm@2025-03-02T03:14:07]\n"
)


def _stub_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, show_node: str = "") -> Path:
    """A stand-in ``scontrol`` on PATH that records its arguments (no Slurm runs here)."""
    calls = tmp_path / "scontrol-calls.txt"
    stub = tmp_path / "bin" / "scontrol"
    stub.parent.mkdir(exist_ok=True)
    shown = tmp_path / "show-node.txt"
    shown.write_text(show_node)
    stub.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\ncase "$1" in show) cat "{shown}";; esac\n')
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{stub.parent}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_preflight_passes_on_a_cpu_node_with_room(tmp_path: Path) -> None:
    config = _config(tmp_path, "preflight:\n  min_free_bytes:\n    /: 1 MiB\n")
    result = CliRunner().invoke(app, ["preflight", "--config", str(config), "--node", "cpu01"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 5 and all(line.startswith("PASS ") for line in lines)
    assert lines[3].startswith("PASS disk_free: / ")


def test_the_shipped_example_config_loads_and_a_missing_config_points_to_it(tmp_path: Path) -> None:
    from pipeline.cli.ops import DEFAULT_CONFIG, EXAMPLE_CONFIG

    repo = Path(__file__).resolve().parents[2]
    example = load_ops_config(repo / EXAMPLE_CONFIG)
    assert example.preflight.expected_gpu_count == 8 and example.preflight.min_free_bytes["/scratch"] > 0
    assert str(DEFAULT_CONFIG) in (repo / EXAMPLE_CONFIG).read_text()  # it says where it goes
    with pytest.raises(ConfigError, match=f"copy the commented example {EXAMPLE_CONFIG} there"):
        CliRunner().invoke(
            app, ["preflight", "--config", str(tmp_path / "absent.yaml")], catch_exceptions=False
        )


def test_preflight_fails_and_drains_its_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stub_scontrol(tmp_path, monkeypatch)
    # No file system here has an exbibyte free.
    config = _config(tmp_path, "preflight:\n  min_free_bytes:\n    /: 1 EiB\n")
    args = ["preflight", "--config", str(config), "--node", "gpu06", "--drain-on-fail", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["passed"] is False
    assert [c["name"] for c in report["checks"] if not c["passed"]] == ["disk_free"]
    call = calls.read_text().strip()
    assert call.startswith("update NodeName=gpu06 State=DRAIN Reason=sluice-preflight: disk_free: / (/) has ")


def test_node_sweep_dry_run_resumes_nothing_but_says_what_it_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _stub_scontrol(tmp_path, monkeypatch, DRAINED_CPU01)
    config = _config(tmp_path, "preflight:\n  min_free_bytes:\n    /: 1 MiB\n")
    args = ["sweep", "nodes", "--config", str(config), "--node", "cpu01", "--dry-run"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "DRY_RUN resume cpu01: drained for 'Kill task failed' by slurm; preflight passes" in result.output
    assert calls.read_text().splitlines() == ["show node cpu01"]

    result = CliRunner().invoke(app, args[:-1])
    assert result.exit_code == 0, result.output
    assert calls.read_text().splitlines()[-1] == "update NodeName=cpu01 State=RESUME"


def test_a_sweep_keeps_a_node_whose_preflight_still_fails_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _stub_scontrol(tmp_path, monkeypatch, DRAINED_CPU01)
    config = _config(tmp_path, "preflight:\n  min_free_bytes:\n    /: 1 EiB\n")
    result = CliRunner().invoke(app, ["sweep", "nodes", "--config", str(config), "--node", "cpu01"])
    assert result.exit_code == 0, result.output
    # the decision names the failing check and its reason: the sweep's output is the whole story
    assert "KEPT cpu01: preflight still fails: disk_free: / (/) has " in result.output
    assert calls.read_text().splitlines() == ["show node cpu01"]  # nothing resumed


@pytest.mark.parametrize("command", [["preflight"], ["sweep", "nodes"]])
def test_an_empty_node_name_is_refused_not_taken_for_this_host(tmp_path: Path, command: list[str]) -> None:
    config = _config(tmp_path, "preflight:\n  min_free_bytes:\n    /: 1 MiB\n")
    result = CliRunner().invoke(app, [*command, "--config", str(config), "--node", " "])
    assert result.exit_code == 2, result.output
    assert "an empty node name" in result.output


def test_preflight_says_each_failure_once(tmp_path: Path) -> None:
    """As a person runs it: the report on stdout, logging on stderr, each FAIL said once between them."""
    config = _config(tmp_path, "preflight:\n  min_free_bytes:\n    /: 1 EiB\n")
    sluice = Path(sys.executable).parent / "sluice"
    done = subprocess.run(
        [str(sluice), "ops", "preflight", "--config", str(config), "--node", "cpu01"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    said = done.stdout + done.stderr
    assert said.count("FAIL disk_free") == 1, said
    assert "Traceback" not in said


def test_the_ops_file_refuses_unknown_keys_and_runtimes_with_their_paths(tmp_path: Path) -> None:
    bad = _config(
        tmp_path,
        "preflight:\n  expected_gpu_count: 8\n  container_runtimes: [docker, rkt]\n"
        "  min_free_bytes:\n    scratch: 1 GiB\nsweep:\n  resume_everything: true\n",
    )
    with pytest.raises(ConfigError) as caught:
        load_ops_config(bad)
    message = str(caught.value)
    assert "preflight.container_runtimes[1]" in message and "'rkt'" in message
    assert "preflight.min_free_bytes" in message and "must be absolute" in message
    assert "sweep.resume_everything" in message
