"""Shared fixtures: a real Postgres cluster started by the project's own code, once per test session."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.pgserver import LocalPostgres
from pipeline.rtguard import realtime_threads, take_back, thread_policies

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS = REPO_ROOT.parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[LocalPostgres]:
    """A throwaway cluster for the whole session, never the developer's own (``sluice db up``)."""
    # Not under pytest's tmp folder: that one is private to its owner (0700), and when the suite runs as
    # root the server runs as the postgres user, who must be able to reach its data folder.
    base = Path(tempfile.mkdtemp(prefix="sluice-test-pg-"))
    base.chmod(0o755)
    server = LocalPostgres(base / "pg", fast=True)
    server.up()
    try:
        yield server
    finally:
        server.destroy()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_thread_left_real_time() -> Iterator[None]:
    """After every test, no thread of the pytest process is real-time that was not so before it: one that is
    (SVT-AV1 does it to the thread that opens an encoder, as root) passes its policy to every process
    started after it (pipeline.rtguard). The threads are put back before the test is failed; processes the
    test started keep what they inherited."""
    before = thread_policies()
    yield
    left = {tid: p for tid, p in realtime_threads().items() if before.get(tid) != p}
    if left:
        take_back(before)
        pytest.fail(f"threads left real-time (thread id: (policy, priority)): {left}")


_db_counter = itertools.count()


@pytest.fixture
def fresh_database_url(pg_server: LocalPostgres, request: pytest.FixtureRequest) -> Callable[[], str]:
    """A factory: each call creates a new empty database on the session's server and returns its URL."""

    def make() -> str:
        stem = "".join(ch if ch.isalnum() else "_" for ch in request.node.name.lower())[:40]
        return pg_server.create_database(f"t{next(_db_counter)}_{stem}")

    return make


@pytest.fixture
def migrated_database_url(fresh_database_url: Callable[[], str]) -> str:
    """A new database on the session's server, migrated to head; superuser URL."""
    from pipeline.catalog import migrate

    url = fresh_database_url()
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session")
def role_passwords() -> tuple[str, str]:
    """The catalog roles' passwords for the whole session (roles are cluster-wide: every test that sets
    them up uses these, so none locks another out)."""
    import secrets

    return secrets.token_urlsafe(16), secrets.token_urlsafe(16)


@pytest.fixture
def ingest_role_url(migrated_database_url: str, role_passwords: tuple[str, str]) -> str:
    """The ingest (writer) role's URL on the migrated database, its privileges granted there."""
    from pipeline.catalog.roles import ensure_roles

    return ensure_roles(migrated_database_url, *role_passwords).writer_url


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The shared corpus of real files (read-only, never copied into the repo)."""
    if not CORPUS.is_dir():
        pytest.fail(f"shared corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium (``make test`` installs it when missing); the browser tests skip without it."""
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")


@pytest.fixture(scope="session")
def connection_log(pg_server: LocalPostgres) -> Callable[[str], Callable[[], list[str]]]:
    """Who connects to a database: the session's server logs every connection (``log_connections``);
    ``connection_log(database)`` marks the log's end now and returns a function giving the user of every
    connection to ``database`` since the mark, but those of ``ignore_application`` (the test's own
    readers, labelled with that ``application_name``); ``with_application`` adds each one's name."""
    import re

    import sqlalchemy as sa

    engine = sa.create_engine(pg_server.url(), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text("ALTER SYSTEM SET log_connections = on"))
        conn.execute(sa.text("SELECT pg_reload_conf()"))
    engine.dispose()

    def since_now(
        database: str, *, ignore_application: str | None = None, with_application: bool = False
    ) -> Callable[[], list[str]]:
        start = pg_server.log_file.stat().st_size
        pattern = re.compile(
            rf"connection authorized: user=(\S+) database={re.escape(database)}(?:[ \t]+application_name=(\S+))?"
            r"(?:[ \t][^\n]*)?$",  # the name whole: not the prefix of another database's
            re.MULTILINE,
        )

        def users() -> list[str]:
            with open(pg_server.log_file, "rb") as log:
                log.seek(start)
                text = log.read().decode("utf-8", "replace")
            found = pattern.finditer(text)
            return [
                f"{m.group(1)} ({m.group(2)})" if with_application else m.group(1)
                for m in found
                if ignore_application is None or m.group(2) != ignore_application
            ]

        return users

    return since_now
