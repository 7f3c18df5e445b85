"""The cluster-mode services of one SLUICE_HOME, in one place: ``sluice services up | status | down``.

Each lives in ``$SLUICE_HOME/services/<name>/`` (pid file with the process's start instant, port, log), so
``status`` and ``down`` find what any earlier command started, by those files alone. Postgres and the local
Airflow keep their own homes and commands (``sluice db``, ``sluice airflow``: they are started with a
migration, a configuration, pools), so ``up`` and ``down`` here are for the parts cluster mode adds (the S3
server, Redis and the Ray cluster); ``status`` lists those two as well, found the same way: the Airflow
components are :class:`~pipeline.services.daemon.Daemon` s under ``$SLUICE_HOME/airflow/run``, Postgres is
the postmaster ``pg_ctl`` records in its data folder (``postmaster.pid``).

A part of several processes some of which run (the Ray head without its worker node) is *partly running*:
``status`` names which run and which do not, and ``up`` starts only those that do not. ``status`` and
``down`` only read those files: asking about a service nothing started chooses no port and makes no folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import UnknownChoiceError
from pipeline.services.daemon import Daemon, Started
from pipeline.services.raynodes import NodeSpec, RayCluster
from pipeline.services.redis import LocalRedis
from pipeline.services.s3server import LocalS3Server

#: The worker node cluster mode starts: two CPUs (a transcode's request) and its memory.
RAY_WORKER = NodeSpec("worker1", cpus=2, memory_bytes=6 * 1024**3)
PARTS = ("s3", "redis", "ray")
#: What ``status`` lists, in its order: the parts above and the local Postgres and Airflow.
LISTED = ("postgres", "airflow", *PARTS)
RUNNING, PARTLY_RUNNING, STOPPED = "running", "partly running", "stopped"


@dataclass(frozen=True)
class Part:
    name: str
    up: Callable[[], Started]
    down: Callable[[], bool]
    daemons: Callable[[], list[Daemon]]
    where: Callable[[], str]


def s3_server(home: Path) -> LocalS3Server:
    """The S3 server (moto) of this SLUICE_HOME."""
    return LocalS3Server(home / "services" / "s3")


def redis_server(home: Path) -> LocalRedis:
    """The Redis (Celery broker) of this SLUICE_HOME."""
    return LocalRedis(home / "services" / "redis")


def ray_cluster(home: Path) -> RayCluster:
    """The Ray head (one CPU) and worker node (:data:`RAY_WORKER`) of this SLUICE_HOME."""
    return RayCluster(home / "services" / "ray", head_cpus=1, workers=(RAY_WORKER,))


def parts(home: Path) -> dict[str, Part]:
    s3, redis, ray = s3_server(home), redis_server(home), ray_cluster(home)
    return {
        "s3": Part("s3", s3.start, s3.down, lambda: [s3.daemon], lambda: s3.endpoint_url),
        "redis": Part("redis", redis.start, redis.down, lambda: [redis.daemon], lambda: redis.url),
        "ray": Part(
            "ray",
            ray.start,
            lambda: bool(ray.down()),
            lambda: [ray.head(), *(ray.worker(n) for n in ray.workers)],
            lambda: ray.address,
        ),
    }


def select(home: Path, names: list[str] | None) -> list[Part]:
    known = parts(home)
    for name in names or []:
        if name not in known:
            raise UnknownChoiceError("service", name, PARTS)
    return [known[n] for n in (names or PARTS)]


def status(home: Path, names: list[str] | None = None) -> dict[str, Any]:
    """Per part (Postgres and Airflow first; only ``names`` when given, any of :data:`LISTED`): its
    ``state`` (:data:`RUNNING`, :data:`PARTLY_RUNNING` or :data:`STOPPED`), ``running`` (all of its
    processes run), where it serves (when any of them runs) and each process's pid (None: not running) and
    log. Reading it records nothing: no port is chosen, no folder made."""
    for name in names or []:
        if name not in LISTED:
            raise UnknownChoiceError("service", name, LISTED)
    wanted = names or list(LISTED)
    out: dict[str, Any] = {}
    if "postgres" in wanted:
        out["postgres"] = _postgres_status(home)
    if "airflow" in wanted:
        out["airflow"] = _airflow_status(home)
    for part in parts(home).values():
        if part.name not in wanted:
            continue
        daemons = part.daemons()
        pids = {d.name: d.live_pid() for d in daemons}
        out[part.name] = _summary(
            pids, part.where() if any(pids.values()) else None, {d.name: str(d.log_file) for d in daemons}
        )
    return {name: out[name] for name in LISTED if name in out}


def _summary(pids: dict[str, int | None], where: str | None, logs: dict[str, str]) -> dict[str, Any]:
    live = [pid is not None for pid in pids.values()]
    state = RUNNING if all(live) else PARTLY_RUNNING if any(live) else STOPPED
    return {
        "state": state,
        "running": state == RUNNING,
        "where": where,
        "processes": {name: {"pid": pid, "log": logs[name]} for name, pid in pids.items()},
    }


def _postgres_status(home: Path) -> dict[str, Any]:
    from pipeline.pgserver import LocalPostgres

    pg = LocalPostgres(home / "pg")
    now = pg.status()
    where = f"127.0.0.1:{now.port}" if now.running and now.port else None
    return _summary({"postmaster": now.pid if now.running else None}, where, {"postmaster": str(pg.log_file)})


def _airflow_status(home: Path) -> dict[str, Any]:
    from pipeline.airflow_local import LocalAirflow

    airflow = LocalAirflow(home / "airflow", sluice_env={})
    daemons = airflow.daemons()
    pids = {d.name: d.live_pid() for d in daemons}
    where = airflow.url if pids["api-server"] is not None else None
    return _summary(pids, where, {d.name: str(d.log_file) for d in daemons})
