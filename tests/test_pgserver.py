"""The Postgres the project starts itself: real initdb/pg_ctl, as the postgres user when run as root."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.pgserver import LocalPostgres, database_url
from pipeline.settings import Settings

pytestmark = pytest.mark.integration


def test_session_cluster_is_real_and_hardened(pg_server: LocalPostgres) -> None:
    engine = sa.create_engine(pg_server.url())
    with engine.connect() as conn:
        assert conn.execute(sa.text("SHOW data_checksums")).scalar() == "on"
        assert conn.execute(sa.text("SHOW listen_addresses")).scalar() == "127.0.0.1"
        assert conn.execute(sa.text("SHOW unix_socket_directories")).scalar() == ""
        assert conn.execute(sa.text("SELECT current_user")).scalar() == "sluice"
    engine.dispose()


def test_wrong_password_is_refused(pg_server: LocalPostgres) -> None:
    url = sa.make_url(pg_server.url()).set(password="not-the-password")
    engine = sa.create_engine(url)
    with pytest.raises(sa.exc.OperationalError, match="password authentication failed"):
        engine.connect().close()
    engine.dispose()


def test_lifecycle_up_is_idempotent_and_down_stops() -> None:
    base = Path(tempfile.mkdtemp(prefix="sluice-pg-life-"))
    base.chmod(0o755)
    cluster = LocalPostgres(base / "pg", fast=True)
    try:
        assert not cluster.status().running
        url = cluster.up()
        assert cluster.up() == url  # second up finds the running server
        status = cluster.status()
        assert status.running and status.pid and status.port
        if os.geteuid() == 0:
            # initdb refuses root: the cluster must belong to the postgres user
            assert (base / "pg" / "data").stat().st_uid != 0
        cluster.down()
        assert not cluster.status().running
        engine = sa.create_engine(url, connect_args={"connect_timeout": 2})
        with pytest.raises(sa.exc.OperationalError):
            engine.connect().close()
        # restart keeps the data and the password
        cluster.up()
        assert cluster.status().running
    finally:
        cluster.destroy()
        shutil.rmtree(base, ignore_errors=True)
    assert not (base / "pg").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the server to another user")
def test_a_cluster_under_a_private_folder_runs_as_root(tmp_path: Path) -> None:
    """As containers and CI run: root, SLUICE_HOME under a folder others cannot search (mkdtemp is 0700)."""
    private = Path(tempfile.mkdtemp(prefix="sluice-pg-private-"))
    assert private.stat().st_mode & 0o777 == 0o700
    cluster = LocalPostgres(private / "home" / "pg", fast=True)
    try:
        url = cluster.up()
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1
        engine.dispose()
        # the server's files are where the postgres user can reach them, and only there
        server = cluster.server_folder
        assert server != cluster.root and not server.is_relative_to(private)
        assert (server / "data" / "PG_VERSION").exists() and not (cluster.root / "data").exists()
        assert server.stat().st_mode & 0o777 == 0o700 and server.stat().st_uid != 0
        cluster.down()
        # another process (a later `sluice db up`) finds the same server folder and data
        again = LocalPostgres(private / "home" / "pg", fast=True)
        assert again.data_dir == server / "data"
        again.up()
        assert again.status().running
    finally:
        cluster.destroy()
        shutil.rmtree(private, ignore_errors=True)
    assert not server.exists()


def test_external_database_url_starts_nothing(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", database_url="postgresql+psycopg2://u:p@db.example:5432/x")
    assert database_url(settings) == "postgresql+psycopg2://u:p@db.example:5432/x"
    assert not (tmp_path / "home").exists()


def test_url_of_a_stopped_cluster_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["db", "url"], env={"SLUICE_HOME": str(tmp_path / "h")})
    assert result.exit_code != 0
    assert "sluice db up" in str(result.exception)


#: ``sluice db up`` and ``sluice db migrate`` in a child whose audit hook looks at the secret files on every
#: audited event (each open, chmod, chown, subprocess start): any moment one holds bytes with a mode that
#: lets another user read it is recorded.
WATCH_SECRETS = r"""
import json, os, sys
from pathlib import Path
home = Path(sys.argv[1])
root = home / "pg"
names = ("password", ".initdb-pw", "roles.json")
exposed = []
def look(event, args):
    for name in names:
        try:
            st = os.lstat(root / name)
        except OSError:
            continue
        if st.st_size and st.st_mode & 0o077:
            exposed.append([name, oct(st.st_mode & 0o777), event])
sys.addaudithook(look)
from pipeline.pgserver import local_cluster, migrate_catalog
from pipeline.settings import Settings
settings = Settings(home=home)
cluster = local_cluster(settings)
try:
    cluster.up()
    migrate_catalog(settings)
    modes = {n: oct((root / n).stat().st_mode & 0o777) for n in names if (root / n).exists()}
finally:
    cluster.destroy()
print(json.dumps({"exposed": exposed[:5], "modes": modes}))
"""


def test_secret_files_are_never_readable_by_others_while_the_cluster_comes_up() -> None:
    import json
    import subprocess
    import sys

    base = Path(tempfile.mkdtemp(prefix="sluice-pg-secrets-"))
    base.chmod(0o755)
    try:
        done = subprocess.run(
            [sys.executable, "-c", WATCH_SECRETS, str(base / "home")],
            capture_output=True,
            text=True,
            timeout=300,
            env={k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert report["exposed"] == []
    assert report["modes"] == {"password": "0o600", "roles.json": "0o600"}
