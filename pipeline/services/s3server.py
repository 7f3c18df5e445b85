"""A local S3-protocol server for the store on one machine: moto's server mode, as s3fs's own tests use it.

It keeps its objects in memory, so it is for cluster mode on one machine (``sluice demo --cluster``, the
cluster tests), never for data that must outlive it. Clients reach it through the environment only
(:meth:`LocalS3Server.client_env`): ``AWS_ENDPOINT_URL`` and a key pair, which botocore (and so s3fs) read
like any other S3 endpoint's: nothing in the project's code or configs names the server or a credential.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from pipeline.services.daemon import Daemon, ServiceError, kept_port

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
#: moto accepts any key pair; these only have to be present so that botocore signs its requests.
ACCESS_KEY = "sluice-local"
SECRET_KEY = "sluice-local-secret"
REGION = "us-east-1"


class LocalS3Server:
    """moto's S3 server on a free port of 127.0.0.1; its pid file, port and log under ``root``."""

    name = "s3"

    def __init__(self, root: Path) -> None:
        self.root = root
        self._port_file = root / "s3.port"

    @property
    def port(self) -> int:
        return kept_port(self._port_file)

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def daemon(self) -> Daemon:
        try:
            import moto.server  # noqa: F401
        except ImportError as exc:
            raise ServiceError(
                "the local S3 server is moto's server mode: install the cluster extra "
                "(`make setup`, or `uv sync --extra cluster`)"
            ) from exc
        argv = [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)]
        return Daemon(self.name, argv, run_dir=self.root, log_dir=self.root, ready=self.healthy)

    def healthy(self) -> bool:
        """Whether it answers S3 requests (a bucket listing, anonymous: moto does not check signatures)."""
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/", timeout=2) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def up(self) -> str:
        """Start it (unless it runs) and return its endpoint URL."""
        self.daemon.start()
        log.info("S3 server (moto) at %s", self.endpoint_url)
        return self.endpoint_url

    def down(self) -> bool:
        return self.daemon.stop()

    def client_env(self) -> dict[str, str]:
        """The environment that points botocore, and so s3fs, at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
        }


@contextlib.contextmanager
def client_environment(server: LocalS3Server) -> Iterator[None]:
    """Point this process's S3 clients at ``server`` for the block, and what it starts (their environment
    is inherited): cluster mode sets it before the Ray nodes and the Airflow services start."""
    values = server.client_env()
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def make_buckets(*names: str) -> None:
    """Create these buckets (those that exist are kept) on the S3 endpoint the environment names."""
    import s3fs

    fs = s3fs.S3FileSystem()
    for name in names:
        if not fs.exists(name):
            fs.mkdir(name)
