"""``sluice run`` through the real scheduler on vendors whose source gives nothing: a missing source fails the
run with ``source_missing``, an empty one ends ``succeeded_with_warnings`` with ``source_empty`` recorded,
never a green empty run; and a run that would run no step, or follow it for no time, is refused before
anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from pipeline.errors import ConfigError

SLUICE = Path(sys.executable).with_name("sluice")
VENDOR = "name: {name}\nkind: mcap\nsource: {{url: {url}, settle_s: 0}}\ntopics: {{}}\n"
#: Starting the local Airflow takes about a minute on 2 cores; a run of nothing, seconds after that.
RUN_TIMEOUT_S = 900


def _sluice(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SLUICE), *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )


@pytest.mark.integration
@pytest.mark.airflow
@pytest.mark.slow
@pytest.mark.timeout(3 * RUN_TIMEOUT_S)
def test_sluice_run_fails_on_a_missing_source_and_warns_on_an_empty_one(
    tmp_path: Path, migrated_database_url: str
) -> None:
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    empty = tmp_path / "empty_drop"
    empty.mkdir()
    (vendors / "gone_vendor.yaml").write_text(
        VENDOR.format(name="gone_vendor", url=tmp_path / "no_such_drop")
    )
    (vendors / "quiet_vendor.yaml").write_text(VENDOR.format(name="quiet_vendor", url=empty))
    env = {
        "SLUICE_HOME": str(tmp_path / "home"),
        "SLUICE_DATABASE_URL": migrated_database_url,
        "SLUICE_VENDORS_DIR": str(vendors),
    }
    try:
        missing = _sluice(
            ["run", str(vendors / "gone_vendor.yaml"), "--steps", "ingest", "--keep-running"], env
        )
        assert missing.returncode == 1, missing.stdout + missing.stderr
        assert "Traceback" not in missing.stderr
        assert "failure discover: source_missing" in missing.stdout, missing.stdout
        assert str(tmp_path / "no_such_drop") in missing.stdout

        quiet = _sluice(["run", str(vendors / "quiet_vendor.yaml"), "--steps", "ingest"], env)
        assert quiet.returncode == 0, quiet.stdout + quiet.stderr
        assert "pipeline run succeeded_with_warnings" in quiet.stdout, quiet.stdout
        assert f"warning discover: source_empty: no files under {empty}" in quiet.stdout
        # said as a run that had nothing to do, not with a green tick
        assert "✓" not in quiet.stdout and "⚠ run success" in quiet.stdout, quiet.stdout
        assert f"nothing was processed: source_empty: no files under {empty}" in quiet.stdout
    finally:
        _sluice(["airflow", "down"], env)

    engine = sa.create_engine(migrated_database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT v.name, r.outcome FROM pipeline_runs r JOIN vendors v ON v.id = r.vendor_id")
            ).all()
            recorded = {name: outcome for name, outcome in rows}
    finally:
        engine.dispose()
    assert recorded == {"gone_vendor": "failed", "quiet_vendor": "succeeded_with_warnings"}


@pytest.fixture
def quiet_vendor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A vendor file in its vendors folder; starting the platform (Postgres, Airflow) fails the test."""
    from pipeline.orchestrate import platform

    def local_platform(*_: object, **__: object) -> None:
        raise AssertionError("the platform was started for a run that was to be refused")

    monkeypatch.setattr(platform, "local_platform", local_platform)
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (tmp_path / "drop").mkdir()
    vendor = vendors / "quiet_vendor.yaml"
    vendor.write_text(VENDOR.format(name="quiet_vendor", url=tmp_path / "drop"))
    monkeypatch.setenv("SLUICE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SLUICE_VENDORS_DIR", str(vendors))
    return vendor


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--steps", ""], "every step is off"),
        (["--steps", ","], "every step is off"),
        (["--steps", " , "], "every step is off"),
        (["--steps", "ingest", "--conf", '{"ingest": false}'], "every step is off"),
    ],
)
def test_sluice_run_refuses_a_run_of_no_step_before_starting_anything(
    quiet_vendor: Path, options: list[str], said: str
) -> None:
    from pipeline.cli import app

    result = CliRunner().invoke(app, ["run", str(quiet_vendor), *options])
    assert isinstance(result.exception, ConfigError), result.exception
    assert f"{said}, so the run would do nothing; turn on at least one of: ingest," in str(result.exception)
    assert "running" not in result.output


@pytest.mark.parametrize("timeout_s", ["-5", "0", "nan"])
def test_sluice_run_refuses_a_timeout_that_is_not_positive(quiet_vendor: Path, timeout_s: str) -> None:
    from pipeline.cli import app

    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["run", str(quiet_vendor), "--steps", "ingest", "--timeout-s", timeout_s]
    )
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"--timeout-s {timeout_s}: allowed: a number of seconds > 0" in result.output
