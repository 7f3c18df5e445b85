"""``sluice run VENDOR_FILE``: the command the docs give for "run my new vendor now", against the session's
real scheduler (it finds the services up and leaves them so). Starting and stopping what is not up is the
same code the demo runs (tests/cli/test_demo.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from scheduler_harness import SchedulerHarness
from typer.testing import CliRunner

from pipeline.cli import app

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]


def _env(harness: SchedulerHarness) -> dict[str, str]:
    return dict(harness.airflow.sluice_env)


def test_sluice_run_follows_a_new_vendor_to_success_and_exits_0(scheduler: SchedulerHarness) -> None:
    vendor = scheduler.add_vendor("cli_run_vendor")
    done = CliRunner().invoke(
        app,
        [
            "run",
            str(scheduler.vendors_dir / f"{vendor.name}.yaml"),
            "--steps",
            "ingest,quality_pre,transcode",
        ],
        env=_env(scheduler),
        catch_exceptions=False,
    )
    assert done.exit_code == 0, done.output
    assert "Airflow already running" in done.output
    # Every state change is printed as it happens, then the summary.
    lines = done.output.splitlines()
    for task in ("validate_conf", "ingest[0]", "quality_pre[1]", "transcode[0]", "finalize"):
        assert any(task in line and line.rstrip().endswith("success") for line in lines), task
    assert any("annotate[0]" in line and "skipped" in line for line in lines)
    assert "run success" in done.output and "pipeline run succeeded" in done.output
    toggles = vendor.catalog(
        "SELECT r.step_toggles FROM pipeline_runs r JOIN vendors v ON v.id = r.vendor_id WHERE v.name = :vendor"
    )
    assert toggles == [
        (
            {
                "ingest": True,
                "quality_pre": True,
                "transcode": True,
                "quality_post": False,
                "annotate": False,
                "shard": False,
            },
        )
    ]
    # The DAG was paused (a new vendor's is), is unpaused for the run, and paused again afterwards.
    assert scheduler.client.dag(vendor.name)["is_paused"] is True


def test_a_run_followed_for_too_short_a_time_goes_on_to_its_end(scheduler: SchedulerHarness) -> None:
    """``--timeout-s`` stops following, not the run: the DAG, paused before, stays unpaused until the run
    ends (it was paused again at once, and the run hung with its next tasks never scheduled)."""
    from pipeline.orchestrate.scheduled import RunTimeoutError, follow_run

    vendor = scheduler.add_vendor("cli_run_short")
    done = CliRunner().invoke(
        app,
        ["run", str(scheduler.vendors_dir / f"{vendor.name}.yaml"), "--steps", "ingest", "--timeout-s", "1"],
        env=_env(scheduler),
    )
    assert isinstance(done.exception, RunTimeoutError), done.output
    assert f"{vendor.name} stays unpaused until the run ends" in str(done.exception)
    (run,) = scheduler.client.runs(vendor.name)
    ended = follow_run(scheduler.client, vendor.name, run["dag_run_id"], timeout_s=600)
    assert ended.state == "success", ended


def test_sluice_run_on_a_vendor_whose_source_is_missing_fails_and_says_so(
    scheduler: SchedulerHarness,
) -> None:
    vendor = scheduler.add_vendor("cli_run_typo")
    path = scheduler.vendors_dir / f"{vendor.name}.yaml"
    config = yaml.safe_load(path.read_text())
    config["source"]["url"] = str(vendor.drop) + "_typo"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    done = CliRunner().invoke(app, ["run", str(path)], env=_env(scheduler), catch_exceptions=False)
    assert done.exit_code == 1, done.output
    assert "run failed" in done.output
    message = " ".join(done.output.split())  # rich folds long lines
    assert (
        f"discover failed: SourceMissingError: source_missing: the vendor's source folder {vendor.drop}_typo does not exist"
        in message
    )
    # Recorded on the run as a critical entry naming the folder, so the report and status say it too.
    ((outcome, warnings),) = vendor.catalog(
        "SELECT r.outcome, r.warnings FROM pipeline_runs r JOIN vendors v ON v.id = r.vendor_id "
        "WHERE v.name = :vendor"
    )
    (entry,) = [w for w in warnings if w["step"] == "discover"]
    assert outcome == "failed"
    assert (entry["code"], entry["critical"]) == ("source_missing", True)
    assert f"{vendor.drop}_typo" in entry["detail"]


def test_sluice_run_refuses_bad_requests_before_triggering_anything(
    scheduler: SchedulerHarness, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text("name: elsewhere\n")
    runner = CliRunner()
    done = runner.invoke(app, ["run", str(outside)], env=_env(scheduler))
    assert done.exit_code != 0 and "not in the vendors folder" in str(done.exception)
    vendor = scheduler.add_vendor("cli_run_refused")
    path = str(scheduler.vendors_dir / f"{vendor.name}.yaml")
    done = runner.invoke(app, ["run", path, "--steps", "ingest,transcod"], env=_env(scheduler))
    assert "unknown step 'transcod'" in str(done.exception)
    done = runner.invoke(app, ["run", path, "--conf", "{not json"], env=_env(scheduler))
    assert "not JSON" in str(done.exception)
    if _dag_exists(scheduler, vendor.name):  # refused before Airflow was asked anything
        assert scheduler.client.runs(vendor.name) == []


def _dag_exists(harness: SchedulerHarness, dag_id: str) -> bool:
    from pipeline.orchestrate.airflow_client import AirflowApiError

    try:
        harness.client.dag(dag_id)
    except AirflowApiError:
        return False
    return True
