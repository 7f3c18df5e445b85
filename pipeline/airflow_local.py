"""A local Airflow for one machine, driven as a program: ``sluice airflow up | down | status | pools``.

``pipeline`` never imports ``airflow``; this module runs the ``airflow`` command of the same environment in
subprocesses. Everything lives under ``$SLUICE_HOME/airflow``: its ``airflow.cfg`` (mode 0600: it holds
the generated secrets), the admin password file, pid files and service logs. The metadata DB is the URL
given (:func:`metadata_database_url`: a database of its own in the project's Postgres), or SQLite when none
is given (the unit-level DAG tests). The DAG folder is the repository's ``dags/`` and the
plugin folder its ``plugins/``; the services inherit the ``SLUICE_*`` settings, so tasks see the same
catalog, store and vendor folder as the CLI that started them.

Authentication is on: Airflow 3's simple auth manager with one ``admin`` user whose password is generated
on the first ``up`` and kept in the password file. ``down`` stops exactly the process groups ``up``
started (their pids and start instants are recorded and checked before any signal is sent).
:meth:`LocalAirflow.client` talks to the running installation (REST API, metadata DB).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import InfrastructureError
from pipeline.services.daemon import Daemon, process_start_mark

if TYPE_CHECKING:
    from pipeline.config import VendorConfig
    from pipeline.orchestrate.airflow_client import AirflowClient
    from pipeline.settings import Settings

log = logging.getLogger(__name__)

#: The repository this package is installed from (editable install): its dags/ and plugins/ folders.
REPO_ROOT = Path(__file__).resolve().parents[1]
#: The services ``up`` starts, in start order; the API server also serves the task execution API.
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
ADMIN_USER = "admin"
DEFAULT_PORT = 8080
#: The LocalExecutor runs at most this many tasks at once. The pools are the real limit; this only has to
#: exceed the largest pool (cpu 2 + io 4 + db 4 + gpu 1 by default).
DEFAULT_PARALLELISM = 16
#: How often the DAG processor re-reads the DAG files (Airflow's default is 30 s): a vendor file added
#: while Airflow runs becomes a DAG within this, and ``vendor_dags.py`` parses in about a second.
MIN_FILE_PROCESS_INTERVAL_S = 10
#: ``airflow db migrate`` and ``pools import`` start a full Airflow (≈ 10 s here); the API server needs
#: longer on first start (it builds the UI's routes).
CLI_TIMEOUT_S = 300.0
UP_TIMEOUT_S = 180.0
DOWN_TIMEOUT_S = 30.0


class AirflowLocalError(InfrastructureError):
    """The local Airflow could not be configured, started, reached or stopped."""


@dataclass(frozen=True)
class PoolSpec:
    slots: int
    description: str = ""


@dataclass(frozen=True)
class ServiceStatus:
    component: str
    pid: int | None
    running: bool


@dataclass(frozen=True)
class AirflowStatus:
    url: str
    user: str
    password_file: Path
    services: tuple[ServiceStatus, ...]
    health: dict[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return all(s.running for s in self.services)

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "user": self.user,
            "password_file": str(self.password_file),
            "running": self.running,
            "services": {s.component: {"pid": s.pid, "running": s.running} for s in self.services},
            "health": self.health,
        }


def pools_from_vendors(vendors: Iterable[VendorConfig]) -> dict[str, PoolSpec]:
    """The Airflow pools the vendors declare; where vendors disagree on a pool's size, the largest wins."""
    pools: dict[str, PoolSpec] = {}
    for vendor in vendors:
        for name, pool in vendor.pools.items():
            known = pools.get(name)
            if known is None or pool.slots > known.slots:
                pools[name] = PoolSpec(pool.slots, pool.description or (known.description if known else ""))
    return dict(sorted(pools.items()))


def metadata_database_url(settings: Settings) -> str:
    """Airflow's metadata DB: ``SLUICE_AIRFLOW_DATABASE_URL`` when set, else a database of its own on the
    catalog's server, named ``<catalog database>_airflow`` (``sluice_airflow`` in the local cluster),
    created when missing. The catalog's server must be running."""
    if settings.airflow_database_url:
        return settings.airflow_database_url
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from pipeline.errors import DatabaseError
    from pipeline.pgserver import database_url

    catalog = make_url(database_url(settings))
    name = f"{catalog.database}_airflow"
    engine = create_engine(catalog, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first()
            if exists is None:
                # DDL takes no bound parameters: the name is quoted as an identifier by the dialect.
                conn.execute(text("CREATE DATABASE " + conn.dialect.identifier_preparer.quote(name)))
                log.info("created Airflow's metadata database %s", name)
    except SQLAlchemyError as exc:
        raise DatabaseError(
            f"cannot create Airflow's metadata database {name!r} beside the catalog "
            f"({type(exc).__name__}: {str(exc).splitlines()[0]}); create it, or set "
            "SLUICE_AIRFLOW_DATABASE_URL to one Airflow may use"
        ) from None
    finally:
        engine.dispose()
    return catalog.set(database=name).render_as_string(hide_password=False)


def settings_env(settings: Settings) -> dict[str, str]:
    """The ``SLUICE_*`` variables that give a child process these settings (relative paths resolved)."""
    from pipeline.orchestrate.vendors import vendors_folder

    env = {
        "SLUICE_HOME": str(settings.home_abs),
        "SLUICE_PROJECT_DIR": str(settings.project_dir_abs),
        "SLUICE_VENDORS_DIR": str(vendors_folder(settings)),
    }
    # Every other setting that is not at its default, so that no new setting is silently dropped.
    for name, value in settings.model_dump(
        exclude_defaults=True, exclude={"home", "project_dir", "vendors_dir"}
    ).items():
        if value is not None:
            env[f"SLUICE_{name.upper()}"] = str(value)
    return env


class LocalAirflow:
    """One local Airflow installation under ``home``; see the module docstring."""

    def __init__(
        self,
        home: Path,
        *,
        sluice_env: Mapping[str, str],
        dags_folder: Path = REPO_ROOT / "dags",
        plugins_folder: Path = REPO_ROOT / "plugins",
        project_dir: Path = REPO_ROOT,
        metadata_url: str | None = None,
        port: int | None = None,
        parallelism: int = DEFAULT_PARALLELISM,
        config_overrides: Mapping[str, Mapping[str, str]] | None = None,
        extra_python_path: Sequence[Path] = (),
    ) -> None:
        self.home = Path(home).resolve()
        self.sluice_env = dict(sluice_env)
        self.dags_folder = Path(dags_folder).resolve()
        self.plugins_folder = Path(plugins_folder).resolve()
        self.project_dir = Path(project_dir).resolve()
        # None: the metadata DB the services were last configured with, else SQLite under home.
        recorded = self._recorded_metadata_url() if metadata_url is None else None
        self.metadata_url = metadata_url or recorded or f"sqlite:///{self.home / 'airflow.db'}"
        self.requested_port = port
        self.parallelism = parallelism
        self.config_overrides = {k: dict(v) for k, v in (config_overrides or {}).items()}
        self.extra_python_path = [Path(p).resolve() for p in extra_python_path]
        self.airflow_bin = Path(sys.executable).with_name("airflow")

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> LocalAirflow:
        """The local Airflow of these settings, under ``$SLUICE_HOME/airflow``."""
        return cls(settings.home_abs / "airflow", sluice_env=settings_env(settings), **kwargs)

    # -- files --------------------------------------------------------------------------------------------

    @property
    def config_path(self) -> Path:
        return self.home / "airflow.cfg"

    @property
    def password_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json.generated"

    @property
    def state_path(self) -> Path:
        return self.home / "sluice_state.json"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs" / "services"

    @property
    def port(self) -> int:
        return int(self._state()["port"])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def admin_password(self) -> str:
        return str(json.loads(self.password_file.read_text())[ADMIN_USER])

    def _recorded_metadata_url(self) -> str | None:
        try:
            url = json.loads(self.state_path.read_text()).get("metadata_url")
        except (OSError, ValueError):
            return None
        return str(url) if url else None

    def _state(self) -> dict[str, Any]:
        """Secrets and the port, made once and kept: a restart must not invalidate tokens or logins."""
        if self.state_path.exists():
            state: dict[str, Any] = json.loads(self.state_path.read_text())
        else:
            state = {
                "jwt_secret": secrets.token_urlsafe(32),
                "api_secret_key": secrets.token_urlsafe(32),
                "fernet_key": base64.urlsafe_b64encode(os.urandom(32)).decode(),
            }
        if self.requested_port is not None:
            state["port"] = self.requested_port
        elif "port" not in state:
            state["port"] = _free_port(DEFAULT_PORT)
        return state

    def configure(self) -> None:
        """Write ``airflow.cfg``, the state file and (once) the admin password file, all mode 0600."""
        self.home.mkdir(parents=True, exist_ok=True)
        for folder in (self.run_dir, self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)
        state = self._state()
        if not any(self._live_pid(c) is not None for c in COMPONENTS):
            state["metadata_url"] = self.metadata_url  # what the services started from here will use
        _write_private(self.state_path, json.dumps(state, indent=1))
        if not self.password_file.exists():
            _write_private(self.password_file, json.dumps({ADMIN_USER: secrets.token_urlsafe(16)}))
        _write_private(self.config_path, self._render_config(state))

    def _render_config(self, state: Mapping[str, Any]) -> str:
        url = f"http://127.0.0.1:{state['port']}"
        sections: dict[str, dict[str, str]] = {
            "core": {
                "dags_folder": str(self.dags_folder),
                "plugins_folder": str(self.plugins_folder),
                "executor": "LocalExecutor",
                "parallelism": str(self.parallelism),
                "load_examples": "False",
                "fernet_key": str(state["fernet_key"]),
                "auth_manager": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
                "simple_auth_manager_users": f"{ADMIN_USER}:admin",
                "simple_auth_manager_passwords_file": str(self.password_file),
                "execution_api_server_url": f"{url}/execution/",
            },
            "database": {"sql_alchemy_conn": self.metadata_url},
            "api": {
                "host": "127.0.0.1",
                "port": str(state["port"]),
                "base_url": url,
                "secret_key": str(state["api_secret_key"]),
            },
            "api_auth": {"jwt_secret": str(state["jwt_secret"])},
            "logging": {"base_log_folder": str(self.home / "logs")},
            "dag_processor": {"min_file_process_interval": str(MIN_FILE_PROCESS_INTERVAL_S)},
        }
        for section, values in self.config_overrides.items():
            sections.setdefault(section, {}).update(values)
        lines = ["# Written by `sluice airflow up`; edits are overwritten on the next `up`."]
        for section, values in sections.items():
            lines += ["", f"[{section}]", *(f"{key} = {value}" for key, value in values.items())]
        return "\n".join(lines) + "\n"

    def env(self) -> dict[str, str]:
        """The environment of every Airflow process: this home, the Sluice settings, the Python path."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__", "SLUICE_"))}
        env.update(self.sluice_env)
        env["AIRFLOW_HOME"] = str(self.home)
        env["AIRFLOW_CONFIG"] = str(self.config_path)
        if self.extra_python_path:
            paths = [str(p) for p in self.extra_python_path]
            env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
        return env

    # -- the airflow command ------------------------------------------------------------------------------

    def run(
        self, args: Sequence[str], *, timeout_s: float, **options: Any
    ) -> subprocess.CompletedProcess[Any]:
        """Run ``airflow ARGS`` against this installation (``options`` go to :func:`subprocess.run`: where
        the output goes); returns whatever it exited with, raises only when it outlives ``timeout_s``."""
        command = [str(self.airflow_bin), *args]
        try:
            return subprocess.run(
                command, env=self.env(), cwd=self.project_dir, timeout=timeout_s, check=False, **options
            )
        except subprocess.TimeoutExpired as exc:
            raise AirflowLocalError(f"`airflow {' '.join(args)}` did not finish in {timeout_s:g} s") from exc

    def cli(self, *args: str, timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """Run ``airflow ARGS`` against this installation; a non-zero exit raises with its output."""
        done = self.run(args, timeout_s=timeout_s, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise AirflowLocalError(f"`airflow {' '.join(args)}` exited {done.returncode}:\n{tail}")
        return done

    def migrate(self) -> None:
        """Create or upgrade the metadata DB."""
        self.configure()
        self.cli("db", "migrate")

    def set_pools(self, pools: Mapping[str, PoolSpec]) -> None:
        """Create or update these pools (other pools are left as they are)."""
        if not pools:
            return
        self.configure()
        payload = {
            name: {"slots": spec.slots, "description": spec.description, "include_deferred": False}
            for name, spec in pools.items()
        }
        path = self.home / "pools.json"
        path.write_text(json.dumps(payload, indent=1))
        self.cli("pools", "import", str(path))

    # -- services -----------------------------------------------------------------------------------------

    def up(
        self, *, pools: Mapping[str, PoolSpec] | None = None, timeout_s: float = UP_TIMEOUT_S
    ) -> AirflowStatus:
        """Configure, migrate, start the services, wait until they report healthy, set the pools.

        When every service already runs, only the pools are set (through the REST API): nothing is
        restarted, and the running services must use this installation's metadata DB. When the API server
        is not running yet and its port is taken by something else, another free port is chosen (and
        kept): the status and ``sluice airflow status`` show which.
        """
        live = [c for c in COMPONENTS if self._live_pid(c) is not None]
        if live:
            recorded = self._state().get("metadata_url")
            if recorded and recorded != self.metadata_url:
                raise AirflowLocalError(
                    f"the local Airflow in {self.home} runs ({', '.join(live)}) on another metadata DB "
                    f"({_redacted(recorded)}); stop it first with `sluice airflow down`"
                )
        if len(live) < len(COMPONENTS):
            if "api-server" not in live and self.state_path.exists():
                state = self._state()
                if not _port_is_free(int(state["port"])):
                    if self.requested_port is not None:
                        raise AirflowLocalError(f"port {self.requested_port} is taken; choose another one")
                    state["port"] = _free_port(0)
                    log.warning("port taken: the API server moves to port %d", state["port"])
                    self.home.mkdir(parents=True, exist_ok=True)
                    _write_private(self.state_path, json.dumps(state, indent=1))
            self.migrate()
            for component in COMPONENTS:
                if component in live:
                    log.info("%s already running", component)
                    continue
                self._start(component)
        self.wait_healthy(timeout_s=timeout_s)
        if pools:
            self.client().set_pools({name: (spec.slots, spec.description) for name, spec in pools.items()})
        return self.status()

    def daemon(self, component: str, *, env: Mapping[str, str] | None = None) -> Daemon:
        """``component`` as a :class:`~pipeline.services.daemon.Daemon`: ``airflow <component>`` in its own
        process group (``down`` stops it with the task workers it forked), ``run/<component>.pid``,
        ``logs/services/<component>.log``. ``env`` is only needed to start it."""
        return Daemon(
            component,
            [str(self.airflow_bin), component],
            run_dir=self.run_dir,
            log_dir=self.log_dir,
            env=env,
            cwd=self.project_dir,
        )

    def daemons(self) -> list[Daemon]:
        return [self.daemon(c) for c in COMPONENTS]

    def _start(self, component: str) -> int:
        return self.daemon(component, env=self.env()).launch()

    def _live_pid(self, component: str) -> int | None:
        """The recorded pid of ``component`` if that very process (same start instant) is still alive.

        The pid file holds the pid and the instant the process started (:func:`process_start_mark`): a
        recycled pid never matches, so a signal only ever goes to the process ``up`` started. (Its command
        line and environment cannot tell: Airflow retitles its processes, which overwrites both in
        ``/proc``.)
        """
        return self.daemon(component).live_pid()

    def down(self, *, timeout_s: float = DOWN_TIMEOUT_S) -> list[str]:
        """Stop the services ``up`` started (SIGTERM to their process groups, SIGKILL after the timeout)."""
        return [c for c in reversed(COMPONENTS) if self.daemon(c).stop(timeout_s=timeout_s)]

    def client(self) -> AirflowClient:
        """The REST API (as the admin user) and the metadata DB of this installation."""
        from pipeline.orchestrate.airflow_client import AirflowClient

        return AirflowClient(
            self.url, user=ADMIN_USER, password=self.admin_password(), metadata_url=self.metadata_url
        )

    def status(self) -> AirflowStatus:
        services = tuple(
            ServiceStatus(c, pid, pid is not None) for c in COMPONENTS for pid in [self._live_pid(c)]
        )
        health = self.health() if services[0].running else {}
        return AirflowStatus(self.url, ADMIN_USER, self.password_file, services, health)

    def health(self) -> dict[str, Any]:
        """The API server's health report ({} when it does not answer)."""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as response:
                report: dict[str, Any] = json.loads(response.read())
                return report
        except (OSError, ValueError):
            return {}

    def wait_healthy(self, *, timeout_s: float = UP_TIMEOUT_S) -> None:
        """Wait until the API server answers and reports scheduler, DAG processor and triggerer healthy."""
        deadline = time.monotonic() + timeout_s
        report: dict[str, Any] = {}
        while time.monotonic() < deadline:
            for component in COMPONENTS:
                if self._live_pid(component) is None:
                    tail = _tail(self.log_dir / f"{component}.log")
                    raise AirflowLocalError(f"airflow {component} exited during start-up:\n{tail}")
            report = self.health()
            parts = ("metadatabase", "scheduler", "dag_processor", "triggerer")
            healthy = report and all(report.get(p, {}).get("status") == "healthy" for p in parts)
            if healthy and self._serves_port():
                return
            time.sleep(1.0)
        raise AirflowLocalError(f"airflow did not report healthy within {timeout_s:g} s: {report}")

    def _serves_port(self) -> bool:
        """Whether the port answers from our API server's process group (not another Airflow's)."""
        import psutil

        pid = self._live_pid("api-server")
        if pid is None:
            return False
        for process in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
            try:
                connections = process.net_connections(kind="tcp")
            except psutil.Error:
                continue
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port for c in connections):
                return True
        return False


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port(preferred: int) -> int:
    """``preferred`` if nothing listens on it, else a free port the OS picks."""
    for candidate in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise AirflowLocalError("no free TCP port on 127.0.0.1")


def _redacted(url: str) -> str:
    """A database URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: say only its scheme
        return url.split("://", 1)[0] + "://…"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(0o600)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


__all__ = [
    "COMPONENTS",
    "AirflowLocalError",
    "AirflowStatus",
    "LocalAirflow",
    "PoolSpec",
    "ServiceStatus",
    "metadata_database_url",
    "pools_from_vendors",
    "process_start_mark",
    "settings_env",
]
