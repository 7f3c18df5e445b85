"""``sluice demo`` end to end, as ``make demo`` runs it: every example vendor through its Airflow DAG (the
ROS 2 one on a drop of JPEG cameras in CDR, a broken JPEG among its defects), triggered through the REST API
and run by a real scheduler.

The demo runs in a subprocess on a copy of the project's vendor and dataset files (so its drops land in the
test's folder), against a fresh database of the suite's Postgres (Airflow's metadata DB is made beside it);
what it left is then read back from the catalog, the store and the Airflow metadata DB, and nothing it
started may still run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import Sluice, clean_error
from typer.testing import CliRunner

from pipeline.cli import app

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SLUICE = Path(sys.executable).with_name("sluice")


def test_demo_options_are_checked_before_any_drop_is_emptied_or_service_started(
    tmp_path: Path, sluice: Sluice
) -> None:
    """``--seconds nan`` (or 0, or past the generator's two hours) used to escape as pydantic's
    ValidationError after the first vendor's drop folder had been emptied; ``--episodes 0`` left the
    demo's dataset with nothing to hold."""
    from pipeline.config import load_vendors
    from pipeline.config.models import local_source_path

    project = tmp_path / "project"
    shutil.copytree(REPO / "dags" / "vendors", project / "dags" / "vendors")
    env = {
        "SLUICE_HOME": str(tmp_path / "home"),
        "SLUICE_PROJECT_DIR": str(project),
        "SLUICE_VENDORS_DIR": str(project / "dags" / "vendors"),
    }
    kept = []
    for vendor in load_vendors(project / "dags" / "vendors", base_dir=project).values():
        assert not isinstance(vendor, Exception)
        marker = local_source_path(vendor.source.url, project) / "kept"
        marker.parent.mkdir(parents=True)
        marker.write_text("an earlier drop")
        kept.append(marker)
    for seconds, said in (
        ("nan", "a finite number"),
        ("0", "greater than 0"),
        ("1e9", "less than or equal to 7200"),
    ):
        clean_error(
            sluice(["demo", "--seconds", seconds], env), "sluice demo", f"seconds: Input should be {said}"
        )
    clean_error(sluice(["demo", "--episodes", "0"], env), "'--episodes'", "greater than or equal to 1")
    assert all(m.read_text() == "an earlier drop" for m in kept)
    assert not (tmp_path / "home").exists()  # no catalog, Airflow or store was made: nothing started


@pytest.mark.timeout(1800)
def test_demo_runs_every_vendor_dag_end_to_end_through_the_scheduler(
    tmp_path: Path, fresh_database_url
) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from pipeline.airflow_local import LocalAirflow

    project = tmp_path / "project"
    for folder in ("vendors", "datasets"):
        shutil.copytree(REPO / "dags" / folder, project / "dags" / folder)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SLUICE_"))}
    catalog_url = fresh_database_url()
    env |= {
        "SLUICE_HOME": str(home),
        "SLUICE_PROJECT_DIR": str(project),
        "SLUICE_VENDORS_DIR": str(project / "dags" / "vendors"),
        "SLUICE_DATABASE_URL": catalog_url,
    }

    airflow = LocalAirflow(home / "airflow", sluice_env={})
    try:
        done = subprocess.run(
            [str(SLUICE), "demo", "--episodes", "2", "--seconds", "2"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
    finally:
        # What the demo started, it stopped (stopped here all the same when the demo did not, or hung).
        left_running = [s.component for s in airflow.status().services if s.running]
        airflow.down()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert left_running == []

    # Every DAG ran every step through the scheduler, annotate and shard switched on by the run's conf.
    catalog = make_url(catalog_url)
    metadata = create_engine(catalog.set(database=f"{catalog.database}_airflow"))
    try:
        with metadata.connect() as db:
            runs = dict(db.execute(text("SELECT dag_id, state FROM dag_run")).all())
            triggers = {t for (t,) in db.execute(text("SELECT triggered_by FROM dag_run"))}
            tasks = {
                (dag, task): state
                for dag, task, state in db.execute(text("SELECT dag_id, task_id, state FROM task_instance"))
            }
            executors = {e for (e,) in db.execute(text("SELECT DISTINCT hostname FROM task_instance"))}
    finally:
        metadata.dispose()
    assert runs == {"acme_robotics": "success", "kestrel_ros2": "success", "northwind_video": "success"}
    assert {str(t).lower() for t in triggers} == {"rest_api"}  # as the UI triggers, not `dags test`
    assert executors and "" not in executors
    for dag in runs:
        for task in ("ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard", "finalize"):
            assert tasks[(dag, task)] == "success", (dag, task, tasks)

    # The catalog: one recorded pipeline run per vendor, and every input in exactly one state.
    runner = CliRunner()
    cli_env = {k: v for k, v in env.items() if k.startswith("SLUICE_")}
    status = json.loads(runner.invoke(app, ["status", "--json"], env=cli_env, catch_exceptions=False).output)
    assert sorted((r["vendor"], r["outcome"]) for r in status["runs"]) == [
        ("acme_robotics", "succeeded"),
        ("kestrel_ros2", "succeeded"),
        ("northwind_video", "succeeded"),
    ]
    assert {r["step_toggles"]["annotate"] for r in status["runs"]} == {True}
    files = json.loads(
        runner.invoke(app, ["files", "list", "--json"], env=cli_env, catch_exceptions=False).output
    )
    drops = {
        vendor: json.loads((project / ".sluice" / "drops" / vendor / "drop.json").read_text())
        for vendor in ("acme_robotics", "kestrel_ros2", "northwind_video")
    }
    generated = {(v, f["path"]): f for v, drop in drops.items() for f in drop["files"]}
    recorded = {(r["vendor"], r["path"]): r for r in files}
    assert set(recorded) == set(generated)
    for key, made in generated.items():
        # The generator records what each file must end as (its defect's state and reason codes).
        record = recorded[key]
        assert record["state"] == made["expected_state"], (key, record)
        assert sorted(record["reasons"]) == sorted(made["expected_reasons"]), (key, record)
        if made["duplicate_of"]:
            assert record["duplicate_of"] == made["duplicate_of"], (key, record)
    assert {r["state"] for r in files} >= {"accepted", "accepted_with_flags", "quarantined", "duplicate"}
    broken_jpeg = next(k for k, f in generated.items() if f["defect"] == "corrupt_image")
    assert broken_jpeg[0] == "kestrel_ros2" and recorded[broken_jpeg]["reasons"] == ["decode_error"]
    # A clip spliced from two recordings in different matrices passes ingest and the pre-gate; the
    # scheduler's transcode task refuses it, and it ends quarantined with what it found.
    spliced = next(k for k, f in generated.items() if f["defect"] == "colour_change")
    assert recorded[spliced]["reasons"] == ["colour_mismatch"], recorded[spliced]
    assert recorded[spliced]["detail"].startswith("transcode: picture "), recorded[spliced]
    assert "names the colour matrix bt601, the stream began in bt709" in recorded[spliced]["detail"]

    # The video vendor's BT.709 footage: every transcoded clip read as BT.709 by the post-gate, as its source.
    engine = create_engine(catalog_url)
    try:
        with engine.connect() as db:
            colours = db.execute(
                text(
                    "SELECT c.status, c.observed FROM check_results c JOIN episodes e ON e.id = c.episode_id "
                    "JOIN vendors v ON v.id = e.vendor_id WHERE v.name = 'northwind_video' "
                    "AND c.gate = 'quality_post' AND c.check_name = 'colour'"
                )
            ).all()
    finally:
        engine.dispose()
    assert colours, "no clip's colours were checked"
    for status, observed in colours:
        assert status == "passed" and observed["output"] == ["bt709"], (status, observed)

    # Outputs: transcoded episodes and shards in the store, a manifest for the demo dataset.
    store = home / "store"
    assert list((store / "derived" / "transcode").rglob("episode.mcap"))
    assert list((store / "shards").rglob("*.tar"))
    assert (store / "manifests" / "demo_accepted" / "v1").is_dir()
    assert "training rank 0 of 2 memory-mapped its share of the train split" in done.stdout

    # The ROS 2 fleet's clean episodes, transcoded by the scheduler's runs, exported as a LeRobot v3 dataset
    # (`make test-lerobot` reads such exports with lerobot itself).
    exported = home / "exports" / "lerobot" / "kestrel_teleop" / "v1"
    report = json.loads((exported / "sluice_export_report.json").read_text())
    assert report["ok"] and report["episodes"] >= 2 and not report["skipped"], report
    info = json.loads((exported / "meta" / "info.json").read_text())
    assert info["robot_type"] == "kestrel_arm" and info["total_episodes"] == report["episodes"]
    assert info["features"]["observation.state"]["names"][:2] == ["joint_1.position", "joint_2.position"]
    assert info["features"]["action"]["names"][-1] == "gripper_command.max_effort"
    assert sorted(k for k, f in info["features"].items() if f["dtype"] == "video") == [
        f"observation.images.{c}" for c in ("front", "wrist_left", "wrist_right")
    ]
    assert f"LeRobot v3 export of kestrel_teleop@v1: {report['episodes']} episodes" in done.stdout

    # The re-encoded clip was accepted, grouped with its original, and the dataset kept one of the two.
    copy = next(f for f in drops["northwind_video"]["files"] if f["defect"] == "reencoded")
    original = copy["details"]["near_duplicate_of"]
    shown = next(line for line in done.stdout.splitlines() if "near-duplicate group" in line)
    assert f"northwind_video/{original}" in shown and f"northwind_video/{copy['path']}" in shown, shown
    kept = int(shown.split("kept episode ")[1].split()[0])
    dataset = json.loads(
        runner.invoke(
            app, ["dataset", "show", "demo_accepted@v1", "--json"], env=cli_env, catch_exceptions=False
        ).output
    )
    (group,) = dataset["near_duplicates"]
    assert group["kept"] == kept and len(group["dropped"]) == 1

    # The Python examples in the docs run as written on what the demo left, from a folder laid out as the
    # project's (.venv, and .sluice as the demo's home): a doc's ```python blocks are one script, in order.
    cwd = tmp_path / "reader"
    cwd.mkdir()
    (cwd / ".venv").symlink_to(Path(sys.executable).parents[1])
    (cwd / ".sluice").symlink_to(home)
    # one rank over the whole train split: its robot episodes and the video's clips both (two ranks of a
    # demo this small can leave one with clips only, which the sample loader refuses by name)
    out = _run_doc_examples(REPO / "docs" / "datasets.md", cwd, env | {"RANK": "0", "WORLD_SIZE": "1"})
    assert "of the train rows 0.." in out and " train {'front': 2" in out and " train clip 0: " in out, out
    assert "\n9 8 [" in out, out  # the SampleLoader example's tenth batch of eight
    out = _run_doc_examples(REPO / "docs" / "episodes.md", cwd, env)
    assert "['front', 'wrist_left', 'wrist_right']" in out and "'frames_returned': 6" in out, out


def _run_doc_examples(doc: Path, cwd: Path, env: dict[str, str]) -> str:
    """Run ``doc``'s ```python blocks as one script in ``cwd``; its output (a failure shows the script)."""
    blocks = re.findall(r"^```python\n(.*?)^```", doc.read_text(), flags=re.S | re.M)
    assert blocks, f"no ```python block in {doc}"
    script = "\n".join(blocks)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{doc.name}'s examples failed:\n{script}\n{done.stdout}\n{done.stderr}"
    return done.stdout
