"""Bad input to the commands that read the catalog or the warehouse: one clean error naming what was wrong
(exit 2), never a traceback, and never a green run that checked or wrote nothing. Run through the console
script's entry point against a migrated database of the session's Postgres."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import Sluice, clean_error

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path, migrated_database_url: str) -> dict[str, str]:
    return {"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DATABASE_URL": migrated_database_url}


@pytest.fixture
def recorded_run(env: dict[str, str]) -> int:
    """A pipeline run of the example robot vendor, opened in the catalog (nothing ingested)."""
    from pipeline import orchestrate
    from pipeline.config import load_vendor
    from pipeline.settings import load_settings
    from pipeline.steps.runner import build_context

    settings = load_settings(home=Path(env["SLUICE_HOME"]), database_url=env["SLUICE_DATABASE_URL"])
    ctx = build_context(settings)
    try:
        vendor = load_vendor(REPO / "dags" / "vendors" / "acme_robotics.yaml")
        toggles = orchestrate.validate_conf(vendor, {})
        return orchestrate.start_run(ctx, vendor, dag_id=vendor.name, run_id="manual__input", toggles=toggles)
    finally:
        ctx.engine.dispose()


def test_report_out_that_cannot_take_the_file_is_refused_before_the_plots(
    sluice: Sluice, env: dict[str, str], recorded_run: int, afile: Path, under_proc: Path, tmp_path: Path
) -> None:
    run = str(recorded_run)
    for out, why in (
        (afile / "r.html", f"{afile} is a file, not a directory"),
        (under_proc / "r.html", "the filesystem of /proc refused it"),
        (tmp_path, "it is a directory"),
    ):
        clean_error(sluice(["report", run, "--out", str(out)], env), f"cannot write the report to {out}", why)
    written = sluice(["report", run, "--out", str(tmp_path / "r.html")], env)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "r.html").stat().st_size > 0


def test_status_runs_beyond_what_the_catalog_can_limit_is_a_usage_error(
    sluice: Sluice, env: dict[str, str]
) -> None:
    clean_error(sluice(["status", "--runs", "99999999999999999999"], env), "less than or equal to 100000")


def test_query_limits_that_are_unbounded_are_refused(sluice: Sluice, env: dict[str, str]) -> None:
    synced = sluice(["warehouse", "sync"], env)
    assert synced.returncode == 0, synced.stderr
    for option, value in (
        ("--timeout-s", "inf"),
        ("--timeout-s", "1e300"),
        ("--memory-limit-bytes", "1" + "0" * 22),
    ):
        result = sluice(["query", "select 1", option, value], env)
        clean_error(result, f"Invalid value for '{option}'", "less than or equal to")
    from_env = sluice(["query", "select 1"], {**env, "SLUICE_WAREHOUSE_TIMEOUT_S": "inf"})
    clean_error(from_env, "SLUICE_WAREHOUSE_TIMEOUT_S", "less than or equal to 604800", "(given: 'inf')")
    bounded = sluice(["query", "select 1", "--timeout-s", "60"], env)
    assert bounded.returncode == 0 and bounded.stderr == "", bounded.stderr


def test_scrub_refuses_an_unknown_kind_and_says_when_it_checked_nothing(
    sluice: Sluice, env: dict[str, str]
) -> None:
    clean_error(sluice(["scrub", "--kind", "rwa"], env), "unknown --kind 'rwa'", "manifest_parquet", "raw")
    empty = sluice(["scrub", "--kind", "export"], env)
    assert empty.returncode == 0, empty.stderr
    assert "warning: the catalog records no stored object of kind export: none was checked" in empty.stderr
    everything = sluice(["scrub"], env)
    assert "warning: the catalog records no stored object yet: nothing was checked" in everything.stderr


def test_a_store_url_where_no_folder_can_be_made_is_named(
    sluice: Sluice, env: dict[str, str], afile: Path, under_proc: Path
) -> None:
    for store, why in (
        (afile / "store", f"{afile} is a file, not a directory"),
        (under_proc, "the filesystem of /proc refused it"),
    ):
        for args in (["scrub"], ["shard", "any@v1"]):
            result = sluice(args, {**env, "SLUICE_STORE_URL": str(store)})
            clean_error(result, f"the store's folder {store / 'raw'} cannot be made: {why}")


def test_a_warehouse_whose_folder_cannot_be_made_is_named(
    sluice: Sluice, env: dict[str, str], under_proc: Path
) -> None:
    # (a home under a file is refused by the settings before: test_a_home_under_a_file...)
    result = sluice(["warehouse", "sync"], {**env, "SLUICE_HOME": str(under_proc)})
    clean_error(
        result,
        f"the warehouse {under_proc / 'warehouse.duckdb'} cannot be created: the filesystem of /proc refused it",
    )


def test_a_home_under_a_file_or_where_nothing_can_be_made_is_named(
    sluice: Sluice, afile: Path, under_proc: Path
) -> None:
    under_a_file = {"SLUICE_HOME": str(afile / "home")}
    for args in (["db", "status"], ["db", "up"], ["files", "list"]):
        clean_error(sluice(args, under_a_file), "SLUICE_HOME", f"{afile} is a file, not a folder")
    clean_error(
        sluice(["db", "up"], {"SLUICE_HOME": str(under_proc)}),
        f"cannot make the local cluster's folder {under_proc / 'pg'}: the filesystem of /proc refused it",
    )


def test_dataset_list_of_an_unknown_dataset_is_an_error_not_an_empty_table(
    sluice: Sluice, env: dict[str, str]
) -> None:
    clean_error(
        sluice(["dataset", "list", "nosuch"], env),
        "unknown dataset 'nosuch'; allowed: (no dataset version recorded yet)",
    )


def test_empty_listings_say_they_are_empty_beside_the_header(sluice: Sluice, env: dict[str, str]) -> None:
    for args, said in (
        (["files", "list"], "no source file recorded yet"),
        (["files", "list", "--state", "duplicate"], "no source file matches"),
        (["dataset", "list"], "no dataset version recorded yet"),
    ):
        result = sluice(args, env)
        assert result.returncode == 0, result.stderr
        assert len(result.stdout.splitlines()) == 1, result.stdout  # the header, for programs
        assert said in result.stderr, (args, result.stderr)


def test_export_to_a_folder_that_cannot_be_made_is_refused_first(
    sluice: Sluice, env: dict[str, str], afile: Path, under_proc: Path
) -> None:
    for out, why in (
        (afile / "export", f"{afile} is a file, not a directory"),
        (under_proc / "export", "the filesystem of /proc refused it"),
    ):
        result = sluice(["export", "lerobot", "nosuch@v1", str(out)], env)
        clean_error(result, f"cannot write the export to {out}: {why}")


@pytest.fixture
def version_without_its_manifest(env: dict[str, str], tmp_path: Path) -> str:
    """A dataset version the catalog records with a parquet manifest that is not in the store."""
    import sqlalchemy as sa

    from pipeline.catalog.models import DatasetVersion, Manifest

    engine = sa.create_engine(env["SLUICE_DATABASE_URL"])
    try:
        with sa.orm.Session(engine) as session, session.begin():
            version = DatasetVersion(name="gone", version="v1", spec_hash="0" * 64)
            session.add(version)
            session.flush()
            session.add(
                Manifest(
                    dataset_version_id=version.id,
                    format="parquet",
                    uri=(tmp_path / "gone" / "manifest.parquet").as_uri(),
                    sha256="0" * 64,
                    size_bytes=1,
                    row_count=1,
                )
            )
    finally:
        engine.dispose()
    return "gone@v1"


def test_shard_names_a_manifest_it_cannot_read_and_bounds_world_size(
    sluice: Sluice, env: dict[str, str], version_without_its_manifest: str
) -> None:
    result = sluice(["shard", version_without_its_manifest], env)
    clean_error(
        result, "cannot read the parquet manifest of gone@v1", "No such file or directory", "sluice scrub"
    )
    # verifying the shards of a version never sharded checks nothing: not a pass
    clean_error(
        sluice(["shard", "gone@v1", "--verify-only"], env),
        "no shards are recorded for gone@v1: `sluice shard gone@v1` writes them",
    )
    # checked before anything is written; a huge one once took the machine's memory
    clean_error(sluice(["shard", "gone@v1", "--world-size", "-1"], env), "greater than or equal to 0")
    clean_error(
        sluice(["shard", "gone@v1", "--world-size", "99999999999"], env), "less than or equal to 1048576"
    )


def test_db_migrate_and_downgrade_name_the_revisions_they_know(sluice: Sluice, env: dict[str, str]) -> None:
    for args in (["db", "migrate", "nosuchrev"], ["db", "migrate", ""], ["db", "downgrade", "nosuchrev"]):
        clean_error(sluice(args, env), "unknown catalog revision", "0001", "base, head")
    # a relative revision is an argument (the help's "-1"), and one past the first revision is named
    clean_error(
        sluice(["db", "downgrade", "-99"], env),
        "invalid catalog revision '-99'",
        "Relative revision -99 didn't produce 99 migrations",
    )


def test_db_migrate_says_where_the_catalog_is_not_where_it_was_asked_to_go(
    sluice: Sluice, env: dict[str, str]
) -> None:
    from pipeline.catalog.migrate import head

    back = sluice(["db", "migrate", "0001"], env)  # Alembic's upgrade to a revision behind does nothing
    assert back.returncode == 0, back.stderr
    assert f"catalog at revision {head()} (head)" in back.stdout, back.stdout
    assert "warning: the catalog is past 0001: migrate only goes forward" in back.stderr
    heads = sluice(["db", "migrate", "heads"], env)  # a name of the head Alembic resolves: nothing to warn
    assert heads.returncode == 0 and "past" not in heads.stderr, heads.stderr
    down = sluice(["db", "downgrade", "-1"], env)
    assert down.returncode == 0, down.stderr
    assert "catalog at revision" in down.stdout and "(head)" not in down.stdout, down.stdout
    clean_error(
        sluice(["db", "downgrade", head()], env),
        f"invalid catalog revision '{head()}'",
        "not a valid downgrade",
    )
    up = sluice(["db", "migrate"], env)
    assert up.returncode == 0 and f"catalog at revision {head()} (head)" in up.stdout, up.stderr


def test_db_status_with_an_external_url_says_whether_it_answers(
    sluice: Sluice, env: dict[str, str], tmp_path: Path
) -> None:
    import json

    from pipeline.catalog.migrate import head

    there = sluice(["db", "status", "--json"], env)
    assert there.returncode == 0, there.stderr
    said = json.loads(there.stdout)
    assert said["external_reachable"] is True and said["external_revision"] == head(), said
    gone = sluice(["db", "status"], {**env, "SLUICE_DATABASE_URL": "postgresql://me:s3cret@127.0.0.1:1/x"})
    assert gone.returncode == 1, gone.stdout  # it said nothing of the server and exited 0
    assert "external_reachable: False" in gone.stdout and "Connection refused" in gone.stdout
    assert "s3cret" not in gone.stdout


def test_a_catalog_server_that_never_answers_is_given_up_on_and_named(
    sluice: Sluice, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that takes the connection and says nothing (or drops packets) held every command for the
    kernel's TCP retries, about two minutes, with nothing printed; the catalog's engines give up after
    CONNECT_TIMEOUT_S."""
    import socket
    import time

    from pipeline.catalog.engine import CONNECT_TIMEOUT_S

    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel accepts; nobody ever answers the startup packet
        url = f"postgresql://me:s3cret@127.0.0.1:{silent.getsockname()[1]}/x"
        started = time.monotonic()
        status = sluice(["db", "status"], {**env, "SLUICE_DATABASE_URL": url})
        waited = time.monotonic() - started
        files = sluice(["files", "list"], {**env, "SLUICE_DATABASE_URL": url})
    assert status.returncode == 1 and "external_reachable: False" in status.stdout, status.stdout
    assert "timeout expired" in status.stdout and "s3cret" not in status.stdout
    assert CONNECT_TIMEOUT_S <= waited < 4 * CONNECT_TIMEOUT_S
    assert files.returncode == 2 and "Traceback" not in files.stderr
    assert "timeout expired" in files.stderr and "s3cret" not in files.stderr, files.stderr


def test_ops_sweep_refuses_a_host_list_past_any_cluster(sluice: Sluice, tmp_path: Path) -> None:
    import os

    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text(
        "#!/bin/sh\necho 'ReservationName=r1 StartTime=2020-01-01T00:00:00 EndTime=2020-01-02T00:00:00'\n"
        "echo '   Nodes=gpu[1-999999999] Users=root Flags=MAINT State=INACTIVE'\n"
    )
    scontrol.chmod(0o755)
    env = {
        "SLUICE_HOME": str(tmp_path / "home"),
        "PATH": f"{scontrol.parent}{os.pathsep}{os.environ['PATH']}",
    }
    args = [
        "ops",
        "sweep",
        "reservations",
        "--config",
        str(REPO / "docs" / "examples" / "ops.yaml"),
        "--dry-run",
    ]
    # a garbled range once expanded to a billion names (a MemoryError after gigabytes)
    clean_error(sluice(args, env), "cannot read the output of `hostlist`: more than 1048576 names")


def test_db_down_with_nothing_running_says_so(sluice: Sluice, tmp_path: Path) -> None:
    home = {"SLUICE_HOME": str(tmp_path / "home")}
    down = sluice(["db", "down"], home)
    assert down.returncode == 0 and "postgres was not running" in down.stdout, down.stdout  # not "stopped"
    destroyed = sluice(["db", "down", "--destroy"], home)
    assert destroyed.returncode == 0, destroyed.stderr
    assert f"no cluster in {tmp_path / 'home' / 'pg'}" in " ".join(destroyed.stdout.split()), destroyed.stdout
