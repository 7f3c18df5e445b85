"""A throwaway PostgreSQL cluster that Sluice starts and stops itself.

Used by ``sluice db up`` on one machine, by ``make demo`` and by the test suite (a session fixture), so that
every one of them talks to a real Postgres without anyone installing a service by hand. The cluster lives in
one folder (``$SLUICE_HOME/pg`` by default) and listens on 127.0.0.1 only, on a free port chosen at start.

``initdb`` and ``pg_ctl`` refuse to run as root; when the caller is root (CI is), they run as the
``postgres`` system user, who then owns the cluster folder. That user must be able to walk down to it, which
it cannot when the folder lies under one that others cannot search (``/root/...``, any ``mktemp -d``), as it
does in containers and CI: the server's files (data folder, log) then live in a folder of the postgres
user's own (:data:`SERVER_FOLDERS_UNDER_HOME` in its home), named in ``server-folder`` beside the cluster's
other files and removed with them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import DatabaseError, PostgresNotInstalledError
from pipeline.settings import Settings

log = logging.getLogger(__name__)

#: Where Debian's and Ubuntu's ``postgresql-NN`` packages put the server binaries (not on PATH there).
DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"
SUPERUSER = "sluice"
DATABASE = "sluice"
#: Beside the cluster: the passwords of the two catalog roles (see :func:`migrate_catalog`).
ROLES_FILE = "roles.json"
#: The system user that runs the server when the caller is root.
RUN_AS_WHEN_ROOT = "postgres"
#: 16 concurrent test writers, Airflow's pool, Ray workers and the CLI all connect at once.
MAX_CONNECTIONS = 300
START_TIMEOUT_S = 60
#: Where, in the server user's home, the server's files go when the cluster folder is out of its reach.
SERVER_FOLDERS_UNDER_HOME = "sluice-clusters"
#: The file beside the cluster that names that folder (absent: the server's files are in the cluster folder).
SERVER_FOLDER_POINTER = "server-folder"


def find_pg_bin() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``: PATH first, then the newest Debian/Ubuntu install."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).resolve().parent
    candidates = sorted(
        Path("/").glob(DEBIAN_BIN_GLOB.lstrip("/")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    for folder in reversed(candidates):
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    raise PostgresNotInstalledError(["PATH", DEBIAN_BIN_GLOB])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    pid: int | None
    port: int | None
    data_dir: Path
    url: str | None

    def as_dict(self) -> dict[str, object]:
        return {
            "running": self.running,
            "pid": self.pid,
            "port": self.port,
            "data_dir": str(self.data_dir),
            "url": self.url,
        }


class LocalPostgres:
    """One throwaway cluster in ``root``: ``data/`` (the cluster), ``server.log``, ``password``, ``port``.

    ``fast=True`` turns off fsync and synchronous commit: for test clusters that are thrown away after the
    run, where durability across an OS crash buys nothing and costs seconds.
    """

    def __init__(self, root: Path, *, fast: bool = False) -> None:
        self.root = root.expanduser().absolute()
        self.fast = fast
        self._password_file = self.root / "password"
        self._port_file = self.root / "port"
        self._pointer = self.root / SERVER_FOLDER_POINTER

    @property
    def server_folder(self) -> Path:
        """The folder holding the server's own files: the cluster folder, or one the server user can reach."""
        try:
            return Path(self._pointer.read_text().strip())
        except FileNotFoundError:
            return self.root

    @property
    def data_dir(self) -> Path:
        return self.server_folder / "data"

    @property
    def log_file(self) -> Path:
        return self.server_folder / "server.log"

    # -- public API ---------------------------------------------------------------------------------------

    def up(self) -> str:
        """Initialise (once) and start the cluster; return the superuser URL. Idempotent."""
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        status = self.status()
        if status.running and status.url:
            return status.url
        port = free_port()
        options = [
            f"-p {port}",
            "-c listen_addresses=127.0.0.1",
            "-c unix_socket_directories=''",
            f"-c max_connections={MAX_CONNECTIONS}",
        ]
        if self.fast:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run_pg(
            "pg_ctl",
            [
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                str(START_TIMEOUT_S),
                "-o",
                " ".join(options),
                "start",
            ],
        )
        self._port_file.write_text(str(port))
        self._ensure_database(port)
        log.info("postgres up on 127.0.0.1:%d (%s)", port, self.data_dir)
        return self._url(port)

    def down(self) -> None:
        """Stop the cluster if it runs (fast shutdown: open sessions are rolled back)."""
        if self.status().running:
            self._run_pg("pg_ctl", ["-D", str(self.data_dir), "-m", "fast", "-w", "stop"])
        with contextlib.suppress(FileNotFoundError):
            self._port_file.unlink()

    def destroy(self) -> None:
        """Stop and delete the whole cluster folder (and the server's own folder, when it is elsewhere)."""
        self.down()
        if self.server_folder != self.root:
            shutil.rmtree(self.server_folder, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def status(self) -> ServerStatus:
        if not (self.data_dir / "PG_VERSION").exists():
            return ServerStatus(False, None, None, self.data_dir, None)
        pid_file = self.data_dir / "postmaster.pid"
        pid = self._live_pid(pid_file)
        if pid is None:
            return ServerStatus(False, None, None, self.data_dir, None)
        port = int(self._port_file.read_text()) if self._port_file.exists() else None
        return ServerStatus(True, pid, port, self.data_dir, self._url(port) if port else None)

    def url(self) -> str:
        """The superuser URL of the running cluster; raises if it does not run."""
        status = self.status()
        if not status.url:
            raise DatabaseError(f"local postgres in {self.root} is not running; start it with `sluice db up`")
        return status.url

    def create_database(self, name: str) -> str:
        """Create an empty database ``name`` (if absent) and return its URL."""
        port = self.status().port
        if port is None:
            raise DatabaseError(f"local postgres in {self.root} is not running")
        self._create_db(port, name)
        return self._url(port, name)

    @contextlib.contextmanager
    def running(self) -> Iterator[str]:
        """Start for the duration of a ``with`` block, then stop."""
        url = self.up()
        try:
            yield url
        finally:
            self.down()

    # -- internals ----------------------------------------------------------------------------------------

    @property
    def _run_as(self) -> str | None:
        return RUN_AS_WHEN_ROOT if os.geteuid() == 0 else None

    def _initdb(self) -> None:
        from pipeline.paths import make_folder

        why_not = make_folder(self.root)
        if why_not is not None:  # SLUICE_HOME where nothing can be made (/proc, read-only)
            raise DatabaseError(f"cannot make the local cluster's folder {self.root}: {why_not}")
        if not self._password_file.exists():
            write_secret(self._password_file, secrets.token_urlsafe(24))
        user = self._run_as
        if user:
            self._choose_server_folder(user)
        # initdb reads the password from a file that the server user must be able to read; it is a copy
        # that lives only while initdb runs.
        pw_copy = self.server_folder / ".initdb-pw"
        pw_copy.unlink(missing_ok=True)  # left by an initdb that was killed
        ids = pwd.getpwnam(user) if user else None
        write_secret(pw_copy, self._password_file.read_text(), owner=ids)
        if user and ids:
            self.data_dir.mkdir(mode=0o700, exist_ok=True)
            os.chown(self.data_dir, ids.pw_uid, ids.pw_gid)
            # The server writes its log next to the data folder.
            self.log_file.touch()
            os.chown(self.log_file, ids.pw_uid, ids.pw_gid)
        try:
            self._run_pg(
                "initdb",
                [
                    "-D",
                    str(self.data_dir),
                    "-U",
                    SUPERUSER,
                    f"--pwfile={pw_copy}",
                    "--auth=scram-sha-256",
                    "--data-checksums",
                    "--encoding=UTF8",
                    "--no-locale",
                    "--no-instructions",
                ],
            )
        finally:
            pw_copy.unlink(missing_ok=True)

    def _choose_server_folder(self, user: str) -> None:
        """Keep the server's files in the cluster folder when ``user`` can walk down to it; else in a new
        folder of its own under its home, named in :data:`SERVER_FOLDER_POINTER`."""
        if self._pointer.exists() or _reachable_by(user, self.root):
            return
        ids = pwd.getpwnam(user)
        parent = Path(ids.pw_dir) / SERVER_FOLDERS_UNDER_HOME
        if not _reachable_by(user, Path(ids.pw_dir)):
            raise DatabaseError(
                f"the {user!r} user can reach neither {self.root} (a parent folder is not searchable by "
                f"others) nor its home {ids.pw_dir}; choose a SLUICE_HOME under a world-searchable folder"
            )
        parent.mkdir(mode=0o755, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="cluster-", dir=parent))
        os.chown(folder, ids.pw_uid, ids.pw_gid)  # 0700, the server user's: nobody else reads its log
        self._pointer.write_text(f"{folder}\n")
        log.info("%s cannot reach %s: the server's files go to %s", user, self.root, folder)

    def _run_pg(self, tool: str, args: Sequence[str]) -> None:
        cmd = [str(find_pg_bin() / tool), *args]
        if self._run_as:
            try:
                pwd.getpwnam(self._run_as)
            except KeyError:
                raise DatabaseError(
                    f"running as root but there is no {self._run_as!r} user to run {tool} as; "
                    "install postgresql (it creates the user) or run as a normal user"
                ) from None
            cmd = ["runuser", "-u", self._run_as, "--", *cmd]
        # cwd: runuser keeps the caller's cwd, which the postgres user may not be able to read.
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd="/")
        if proc.returncode != 0:
            tail = ""
            if self.log_file.exists():
                with contextlib.suppress(OSError):
                    tail = "\n".join(self.log_file.read_text(errors="replace").splitlines()[-15:])
            raise DatabaseError(
                f"{tool} failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"
                + (f"\nserver log tail:\n{tail}" if tail else "")
            )

    @staticmethod
    def _live_pid(pid_file: Path) -> int | None:
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (FileNotFoundError, IndexError, ValueError, PermissionError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

    def _url(self, port: int, database: str = DATABASE) -> str:
        password = self._password_file.read_text().strip()
        return f"postgresql+psycopg2://{SUPERUSER}:{password}@127.0.0.1:{port}/{database}"

    def _ensure_database(self, port: int) -> None:
        self._create_db(port, DATABASE)

    def _create_db(self, port: int, name: str) -> None:
        import psycopg2
        from psycopg2 import sql

        password = self._password_file.read_text().strip()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                conn = psycopg2.connect(
                    host="127.0.0.1", port=port, user=SUPERUSER, password=password, dbname="postgres"
                )
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        finally:
            conn.close()


def _reachable_by(user: str, folder: Path) -> bool:
    """Whether ``user`` can walk down to (search) ``folder``."""
    probe = subprocess.run(
        ["runuser", "-u", user, "--", "test", "-x", str(folder)], capture_output=True, check=False, cwd="/"
    )
    return probe.returncode == 0


def write_secret(path: Path, text: str, *, owner: pwd.struct_passwd | None = None) -> None:
    """Create ``path`` holding ``text``, readable by its owner only from the first byte on: created with
    mode 0600 (never a default mode chmod'ed afterwards, which leaves a window in which any local user can
    read it), owned by ``owner`` before anything is written, refusing a file or link already there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask may only have taken bits away; make it exactly 0600
        if owner is not None:
            os.fchown(fd, owner.pw_uid, owner.pw_gid)
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def local_cluster(settings: Settings) -> LocalPostgres:
    """The cluster Sluice manages under its home folder."""
    return LocalPostgres(settings.home_abs / "pg")


def database_url(settings: Settings) -> str:
    """The catalog URL: ``SLUICE_DATABASE_URL`` when set, else the running local cluster under home."""
    if settings.database_url:
        return settings.database_url
    return local_cluster(settings).url()


def migrate_catalog(settings: Settings, revision: str = "head") -> list[str]:
    """Migrate the catalog and set up its two roles; returns the roles created or reset.

    On the local cluster, the roles' passwords are generated once and kept (0600) beside the cluster. On an
    external server (``SLUICE_DATABASE_URL``) roles are the operator's business: only the grants are
    refreshed, for roles that exist.
    """
    import json

    from pipeline.catalog.migrate import upgrade
    from pipeline.catalog.roles import RoleNames, ensure_roles, grant_privileges, missing_roles

    url = database_url(settings)
    upgrade(url, revision)
    if settings.database_url:
        missing = missing_roles(url)
        if missing:
            log.warning(
                "roles %s do not exist on this server, so no privileges were granted: create them "
                "(CREATE ROLE name LOGIN PASSWORD '...'), then run `sluice db migrate` again",
                ", ".join(missing),
            )
        else:
            grant_privileges(url)
        return []
    secrets_file = local_cluster(settings).root / ROLES_FILE
    if not secrets_file.exists():
        write_secret(
            secrets_file,
            json.dumps({"writer": secrets.token_urlsafe(24), "reader": secrets.token_urlsafe(24)}),
        )
    passwords = json.loads(secrets_file.read_text())
    ensure_roles(url, passwords["writer"], passwords["reader"])
    names = RoleNames()
    return [names.writer, names.reader]
