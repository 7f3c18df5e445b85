"""A Ray cluster on one machine: a head and worker nodes, each its own ``ray start --block`` process group.

The nodes declare their resources, so that a step's request fits only where it should: the head keeps one
CPU (it runs the GCS; a transcode asking for two CPUs never lands there) and each worker node declares the
CPUs and memory of the machine it stands for. ``SLUICE_RAY_ADDRESS`` set to :attr:`RayCluster.address`
sends the heavy steps there (:mod:`pipeline.raycluster`). A worker node can be killed (a fault test's
``kill -9``) and another started in its place; the runner moves the dead node's items to live workers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.services.daemon import (
    Daemon,
    ServiceError,
    Started,
    claim_port,
    free_port,
    kept_port,
    moved,
    port_answers,
    recorded_port,
)

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
HEAD = "ray-head"
START_TIMEOUT_S = 120.0
#: Memory each node declares for tasks (Ray's ``memory`` resource); the object store gets a small share
#: of its own, enough for the results the runner gathers (they are small: outputs go to the store).
OBJECT_STORE_BYTES = 256 * 1024**2
WORKER_PORTS = (10002, 19999)
AGENT_TIMEOUT_S = 180.0
#: ``ray start`` attempts per node: the head of the first ``make demo-cluster`` that came up did so on its
#: 4th (each failed attempt costs 60-80 s at load 5-8 on 2 cores), so a loaded machine gets more.
START_ATTEMPTS = 8


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpus: int
    memory_bytes: int


class RayCluster:
    """A head and the worker nodes given; pid files, port and logs under ``root``, Ray's own session
    files under :attr:`temp_dir`."""

    def __init__(self, root: Path, *, head_cpus: int = 1, workers: tuple[NodeSpec, ...] = ()) -> None:
        self.root = root
        self.head_cpus = head_cpus
        self.workers = {w.name: w for w in workers}
        self._port_file = root / "ray-head.port"

    @property
    def ray_bin(self) -> Path:
        return Path(sys.executable).with_name("ray")

    @property
    def port(self) -> int:
        return kept_port(self._port_file, _port_outside_worker_range)

    @property
    def address(self) -> str:
        """What ``SLUICE_RAY_ADDRESS`` (``ray.init(address=...)``) takes."""
        return f"{HOST}:{self.port}"

    @property
    def temp_dir(self) -> Path:
        """Ray's session folder: short, because its socket paths (``session_<date>_<pid>/sockets/
        plasma_store`` under it) may not exceed 107 bytes; one per ``root``, so two clusters never share it.
        ``root`` itself would not do: ``$SLUICE_HOME/services/ray`` under /tmp already took 112 bytes."""
        digest = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:10]
        return Path(tempfile.gettempdir()) / f"sluice-ray-{digest}"

    def _daemon(self, name: str, args: list[str]) -> Daemon:
        # Every port a node would take by default is fixed (client server 10001, dashboard 8265, its agent
        # 52365): two nodes on one machine, or another Ray beside this one, would collide on them.
        argv = [
            str(self.ray_bin),
            "start",
            "--block",
            "--disable-usage-stats",
            f"--node-ip-address={HOST}",
            f"--dashboard-agent-listen-port={_port_outside_worker_range()}",
            # Given, not chosen by the agent: the raylet otherwise waits for the agent to write the port it
            # chose to a file, 15 s at most, which a loaded 2-core machine exceeds (the raylet then aborts).
            f"--dashboard-agent-grpc-port={_port_outside_worker_range()}",
            f"--metrics-export-port={_port_outside_worker_range()}",
            f"--runtime-env-agent-port={_port_outside_worker_range()}",
        ]
        return Daemon(name, argv + args, run_dir=self.root, log_dir=self.root / "logs", env=_node_env())

    def _recorded_port(self) -> int:
        """The head's kept port, or 0 before the first start: ``status`` and ``down`` record no port."""
        return recorded_port(self._port_file) or 0

    def head(self) -> Daemon:
        return self._daemon(
            HEAD,
            [
                "--head",
                f"--port={self._recorded_port()}",
                f"--num-cpus={self.head_cpus}",
                "--num-gpus=0",
                f"--object-store-memory={OBJECT_STORE_BYTES}",
                "--include-dashboard=false",
                f"--dashboard-port={_port_outside_worker_range()}",
                f"--ray-client-server-port={_port_outside_worker_range()}",
                f"--temp-dir={self.temp_dir}",
                "--resources=" + json.dumps({"sluice_head": 1}),
            ],
        )

    def worker(self, name: str) -> Daemon:
        spec = self.workers[name]
        return self._daemon(
            name,
            [
                f"--address={HOST}:{self._recorded_port()}",
                f"--num-cpus={spec.cpus}",
                "--num-gpus=0",
                f"--memory={spec.memory_bytes}",
                f"--object-store-memory={OBJECT_STORE_BYTES}",
                "--resources=" + json.dumps({f"node:{name}": 1}),
            ],
        )

    def up(self) -> str:
        """Start what does not run (the head, then every worker node, each once it is in the cluster);
        return the address."""
        return self.start().where

    def start(self) -> Started:
        """Start the nodes that do not run, the head first; those that run are kept.

        When the head must start and another program took its kept port, it starts on a new one, and the
        worker nodes still running (they joined the old address) are started again to join it.
        """
        running = {HEAD} if self.head().live_pid() is not None else set()
        running |= {name for name in self.workers if self.worker(name).live_pid() is not None}
        started: list[str] = []
        notes: tuple[str, ...] = ()
        if HEAD not in running:
            port, given_up = claim_port(self._port_file, HOST, _port_outside_worker_range)
            if given_up is not None:
                notes = moved(given_up, self.address)
                for name in sorted(running):
                    self.worker(name).stop()
                running.clear()
            head = self.head()
            offset = _log_size(head)
            head.ready = lambda: port_answers(HOST, port) and _started(head, offset)
            _start_patiently(head)
            started.append(HEAD)
        for name in self.workers:
            if name not in running:
                self.start_worker(name)
                started.append(name)
        return Started(self.address, tuple(started), tuple(sorted(running)), notes)

    def start_worker(self, name: str) -> int:
        """Start worker node ``name`` (again, after a kill) and wait until the cluster counts it alive; its
        pid (that of the node already running, if it runs)."""
        daemon = self.worker(name)
        pid = daemon.live_pid()
        if pid is not None:
            return pid
        offset = _log_size(daemon)
        daemon.ready = lambda: _started(daemon, offset)
        return _start_patiently(daemon)

    def alive_nodes(self) -> dict[str, str]:
        """Node id -> node name (``ray-head`` or a worker's) of the nodes the cluster counts alive."""
        names = json.dumps(sorted(self.workers))
        probe = (
            "import json, ray\n"
            f"ray.init(address={self.address!r}, log_to_driver=False, logging_level='ERROR')\n"
            f"names = json.loads({names!r})\n"
            "out = {}\n"
            "for n in ray.nodes():\n"
            "    if n['Alive']:\n"
            "        mine = [w for w in names if 'node:' + w in n['Resources']]\n"
            "        out[n['NodeID']] = mine[0] if mine else 'ray-head'\n"
            "print(json.dumps(out))\n"
        )
        # Probed from a child process: a driver connected here would stay connected to this cluster.
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            return {}
        try:
            return dict(json.loads(done.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            return {}

    def kill_worker(self, name: str, signum: int = 9) -> int | None:
        """kill -9 the worker node's process group (raylet and its workers); its pid, or None."""
        return self.worker(name).signal(signum)

    def down(self) -> list[str]:
        stopped = [name for name in self.workers if self.worker(name).stop()]
        if self.head().stop():
            stopped.append(HEAD)
        return stopped

    def running(self) -> bool:
        return self.head().live_pid() is not None


def _start_patiently(daemon: Daemon) -> int:
    """Start a node, again when it gave up waiting for its own agent (what a loaded machine makes it do).

    The raylet waits a fixed 15 s for the dashboard agent it spawns to write its port file (not settable
    in Ray 2.60); that agent, a Python process importing the dashboard, took 27 s on 2 cores at load 10.
    """
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return daemon.start(timeout_s=START_TIMEOUT_S)
        except ServiceError as exc:
            if attempt == START_ATTEMPTS or "timed out during startup" not in str(exc):
                raise
            log.warning(
                "%s gave up waiting for its agent (attempt %d); starting it again", daemon.name, attempt
            )
            daemon.stop()
    raise AssertionError("unreachable")


def _node_env() -> dict[str, str]:
    """The environment of a node's processes: this one, with a patient wait for the node's agents and one
    authentication mode for every node."""
    import os

    # Ray 2.60's `ray start` turns token authentication on when ~/.ray/auth_token exists at that moment (any
    # local `ray.init()` writes it): a head started with it and a worker node without it (or a driver that
    # sends none) then cannot talk ("InvalidAuthToken"; seen with the file appearing between two starts).
    # Off, as before Ray 2.60, for these nodes of one machine; a mode set in the environment is kept.
    auth = {"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    # The raylet waits this long for its dashboard agent to come up and say which ports it serves; the agent
    # (a Python process importing the dashboard) took 30 s on a 2-core machine at load 10, twice the default.
    return os.environ | auth | {"RAY_agent_register_timeout_ms": str(int(AGENT_TIMEOUT_S * 1000))}


def _port_outside_worker_range() -> int:
    """A free port outside the range Ray gives its worker processes (10002-19999), which it refuses."""
    while True:
        port = free_port()
        if not WORKER_PORTS[0] <= port <= WORKER_PORTS[1] and port != 10001:
            return port


def _log_size(daemon: Daemon) -> int:
    """Where what the next start writes begins in the daemon's log (what earlier starts wrote is before)."""
    try:
        return daemon.log_file.stat().st_size
    except OSError:
        return 0


def _started(daemon: Daemon, offset: int = 0) -> bool:
    """Whether ``ray start`` said its node runs (it says so once the node has registered with the GCS)."""
    try:
        with daemon.log_file.open("rb") as handle:
            handle.seek(offset)
            return b"Ray runtime started" in handle.read()
    except OSError:
        return False


def node_name(resources: dict[str, float]) -> str | None:
    """The worker-node name a node's resources declare (``node:<name>``), if any."""
    for key in resources:
        if key.startswith("node:") and not key.startswith("node:__internal") and not key[5:].count("."):
            return key[5:]
    return None


__all__ = ["HEAD", "NodeSpec", "RayCluster", "ServiceError", "node_name"]
