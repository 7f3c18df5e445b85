"""Shared fixtures: a real Postgres cluster started by the project's own code, once per test session."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.pgserver import LocalPostgres

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
