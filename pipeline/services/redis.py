"""Redis for the Celery executor's broker: Debian's ``redis-server``, on a free port of 127.0.0.1 (kept across
restarts unless another program took it meanwhile: see :func:`~pipeline.services.daemon.claim_port`).

No persistence (``--save ''``, ``--appendonly no``): the broker holds only messages about task instances
whose state Airflow keeps in its metadata DB, and a restart must not replay week-old ones.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from pipeline.services.daemon import (
    Daemon,
    ServiceError,
    Started,
    kept_port,
    recorded_port,
    start_on_kept_port,
)

HOST = "127.0.0.1"
PACKAGE = "redis-server"


class LocalRedis:
    name = "redis"

    def __init__(self, root: Path) -> None:
        self.root = root
        self._port_file = root / "redis.port"

    @property
    def port(self) -> int:
        return kept_port(self._port_file)

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def daemon(self) -> Daemon:
        """Its process, as ``status`` and ``down`` find it (they record no port: this reads the kept one)."""
        return self._daemon(recorded_port(self._port_file) or 0)

    def _daemon(self, port: int, binary: str = "redis-server") -> Daemon:
        argv = [binary, "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no"]
        argv += ["--dir", str(self.root)]
        return Daemon(self.name, argv, run_dir=self.root, log_dir=self.root, ready=self.healthy)

    def healthy(self) -> bool:
        """Whether it answers PING with PONG."""
        try:
            with socket.create_connection((HOST, self.port), timeout=2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> Started:
        """Start it unless it runs, on its kept port or, when another program took that, a new one."""
        return start_on_kept_port(
            self.name,
            self.daemon,
            self._port_file,
            HOST,
            lambda port: self._daemon(port, _binary()),
            lambda: self.url,
        )

    def up(self) -> str:
        """Start it (unless it runs) and return its URL."""
        return self.start().where

    def down(self) -> bool:
        return self.daemon.stop()


def _binary() -> str:
    """Debian's ``redis-server`` on the PATH, or a :class:`ServiceError` saying how to install it."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceError(
            f"redis-server is not installed: it is Debian's `{PACKAGE}` package (`apt-get install "
            f"{PACKAGE}`, or `make system-tools` as root)"
        )
    return binary
