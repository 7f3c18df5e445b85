"""A local S3-protocol server for the store on one machine: moto's server mode, as s3fs's own tests use it.

moto keeps its objects in memory, so it is for cluster mode on one machine (``sluice demo --cluster``, the
cluster tests), never for data that must outlive its folder. Clients reach it through the environment only
(:meth:`LocalS3Server.client_env`): ``AWS_ENDPOINT_URL`` and a key pair, which botocore (and so s3fs) read
like any other S3 endpoint's: nothing in the project's code or configs names the server or a credential.

A *durable* server (``LocalS3Server(root, durable=True)``) keeps its objects across a stop and a start, as
a real S3 endpoint does across an outage: that is what the fault test of an S3 restart during ingest
needs. It runs :func:`main` instead of ``moto.server``: moto's own request recorder appends every request
to ``<root>/s3.recording``, and a new process replays that log into its fresh backend, in-process and
before it listens, so no client ever sees a half-restored store. It serves one request at a time, so the
log is the exact order in which requests were applied. What replay cannot restore: timestamps
(``LastModified`` is the replay's) and multipart uploads in flight (moto draws new upload ids).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from pipeline.services.daemon import (
    Daemon,
    ServiceError,
    Started,
    kept_port,
    recorded_port,
    start_on_kept_port,
)

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
#: moto accepts any key pair; these only have to be present so that botocore signs its requests.
ACCESS_KEY = "sluice-local"
SECRET_KEY = "sluice-local-secret"
REGION = "us-east-1"


class LocalS3Server:
    """moto's S3 server on a free port of 127.0.0.1; its pid file, port and log under ``root``.

    A restart serves on the port kept in ``root`` unless another program took it meanwhile: then on a new
    one, which :meth:`start` reports (a server that cannot bind would only exit).

    ``durable``: its objects survive a stop and a start (see the module docstring), at the cost of a log of
    every request's body in ``root``.
    """

    name = "s3"

    def __init__(self, root: Path, *, durable: bool = False) -> None:
        self.root = root
        self.durable = durable
        self._port_file = root / "s3.port"

    @property
    def recording(self) -> Path:
        return self.root / "s3.recording"

    @property
    def port(self) -> int:
        return kept_port(self._port_file)

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def daemon(self) -> Daemon:
        """Its process, as ``status`` and ``down`` find it (they record no port: this reads the kept one)."""
        return self._daemon(recorded_port(self._port_file) or 0)

    def _daemon(self, port: int) -> Daemon:
        if not self.durable:
            argv = [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)]
        else:
            argv = [sys.executable, "-m", __name__, "--port", str(port), "--recording", str(self.recording)]
        return Daemon(self.name, argv, run_dir=self.root, log_dir=self.root, ready=self.healthy)

    def healthy(self) -> bool:
        """Whether an S3 server answers here: a bucket listing (anonymous: moto does not check signatures).

        Its XML, not only a 200: another program on the port (a stray ``http.server``) also answers 200.
        """
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/", timeout=2) as response:
                return response.status == 200 and b"<ListAllMyBucketsResult" in response.read(65536)
        except (OSError, urllib.error.URLError):
            return False

    def start(self) -> Started:
        """Start it unless it runs, on its kept port or, when another program took that, a new one."""
        if self.daemon.live_pid() is None:
            try:
                import moto.server  # noqa: F401
            except ImportError as exc:
                raise ServiceError(
                    "the local S3 server is moto's server mode: install the cluster extra "
                    "(`make setup`, or `uv sync --extra cluster`)"
                ) from exc
        started = start_on_kept_port(
            self.name, self.daemon, self._port_file, HOST, self._daemon, lambda: self.endpoint_url
        )
        if started.started:
            log.info("S3 server (moto) at %s", self.endpoint_url)
        return started

    def up(self) -> str:
        """Start it (unless it runs) and return its endpoint URL."""
        return self.start().where

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


# -- the durable server's process -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """``python -m pipeline.services.s3server --port N --recording FILE``: moto's S3 server that first
    replays ``FILE`` (what earlier processes recorded) and then records every request it serves there."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--recording", type=Path, required=True)
    args = parser.parse_args(argv)
    # moto's recorder reads these when moto.moto_api is first imported.
    os.environ |= {"MOTO_ENABLE_RECORDING": "true", "MOTO_RECORDER_FILEPATH": str(args.recording)}
    os.environ.setdefault("MOTO_PORT", str(args.port))
    from moto.moto_api import recorder
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    app = DomainDispatcherApplication(create_backend_app)
    args.recording.touch()
    recorder.stop_recording()  # the replay must not append to the log it reads
    replayed = replay(app, args.recording)
    recorder.start_recording()
    print(f"replayed {replayed} recorded requests from {args.recording}", flush=True)
    run_simple(HOST, args.port, app, threaded=False, request_handler=MotoRequestHandler)


def replay(app: object, recording: Path) -> int:
    """Apply every request of ``recording`` (moto's recorder format: one JSON object a line) to ``app``.

    A last line cut short by a stop is skipped: its request was never answered, so its client retries it.
    """
    from werkzeug.test import Client

    client = Client(app)  # type: ignore[arg-type]
    count = 0
    for line in recording.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            log.warning("skipping a truncated line of %s", recording)
            continue
        body = entry.get("body") or b""
        if entry.get("body_encoded"):
            body = base64.b64decode(body)
        headers = {
            k: v
            for k, v in entry["headers"].items()
            if k.lower() not in ("host", "content-length", "transfer-encoding")
        }
        parsed = urllib.parse.urlsplit(entry["url"])
        client.open(
            parsed.path,
            base_url=f"{parsed.scheme}://{parsed.netloc}",
            query_string=parsed.query,
            method=entry["method"],
            headers=headers,
            data=body,
        )
        count += 1
    return count


if __name__ == "__main__":
    main()
