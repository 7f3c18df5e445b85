"""Airflow's CeleryExecutor on one machine: Redis as the broker, one Celery worker per queue the DAGs use.

:func:`celery_overrides` is the ``airflow.cfg`` a :class:`~pipeline.airflow_local.LocalAirflow` needs to run
its scheduler with the CeleryExecutor (results in the metadata DB); :class:`CeleryWorkers` starts ``airflow
celery worker`` once per queue, each with its own concurrency, as ``<queue>@<host>`` and in its own process
group (a fault test kills one with -9 while it runs a task). The workers do not serve logs over HTTP (all
on one machine, the API server reads the task logs from disk), so they do not compete for port 8793.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from pipeline.services.daemon import Daemon, DaemonStatus

if TYPE_CHECKING:
    from pipeline.airflow_local import LocalAirflow
    from pipeline.config import VendorConfig

START_TIMEOUT_S = 180.0
#: A worker's concurrency is its pool's slots, at most this: each slot is a forked Airflow process.
MAX_CONCURRENCY = 4


def celery_overrides(broker_url: str, metadata_url: str) -> dict[str, dict[str, str]]:
    """The configuration sections that switch a LocalAirflow to the CeleryExecutor on ``broker_url``."""
    return {
        "core": {"executor": "CeleryExecutor"},
        "celery": {
            "broker_url": broker_url,
            "result_backend": "db+" + metadata_url,
            # Prefetch nothing: a worker takes a task only when one of its processes is free, so that a
            # killed worker holds no queued task hostage.
            "worker_prefetch_multiplier": "1",
            "task_acks_late": "True",
        },
    }


def queues_of(vendors: Iterable[VendorConfig], pools: Mapping[str, int]) -> dict[str, int]:
    """Queue -> worker concurrency for every queue the vendors' DAGs send tasks to.

    The run-level tasks use the ``io``, ``cpu`` and ``db`` queues (dags/sluice_factory.py), the tasks that
    name none (``validate_conf``) Airflow's ``default``; each step its ``celery_queue``. A queue's concurrency is the slots of the pool of the same name (capped), else 1.
    """
    from pipeline.config.operations import DEFAULT_QUEUE
    from pipeline.enums import StepName

    queues = {DEFAULT_QUEUE, "io", "cpu", "db"}
    for vendor in vendors:
        queues |= {vendor.steps[step].celery_queue for step in StepName}
    return {q: max(1, min(MAX_CONCURRENCY, pools.get(q, 1))) for q in sorted(queues)}


class CeleryWorkers:
    """One ``airflow celery worker`` per queue of ``queues`` (queue -> concurrency) for ``airflow``."""

    def __init__(self, airflow: LocalAirflow, queues: Mapping[str, int]) -> None:
        self.airflow = airflow
        self.queues = dict(queues)

    @staticmethod
    def worker_name(queue: str) -> str:
        """The Celery hostname of ``queue``'s worker (``<queue>@<host>``), as its log and Flower show it."""
        return f"{queue}@{socket.gethostname()}"

    def worker(self, queue: str) -> Daemon:
        argv = [
            str(self.airflow.airflow_bin),
            "celery",
            "worker",
            "--queues",
            queue,
            "--concurrency",
            str(self.queues[queue]),
            "--celery-hostname",
            self.worker_name(queue),
            "--skip-serve-logs",
            "--without-gossip",
        ]
        daemon = Daemon(
            f"celery-{queue}",
            argv,
            run_dir=self.airflow.run_dir,
            log_dir=self.airflow.log_dir,
            env=self.airflow.env(),
            cwd=self.airflow.project_dir,
        )
        offset = daemon.log_file.stat().st_size if daemon.log_file.exists() else 0
        daemon.ready = lambda: _says(daemon, b" ready.", offset)
        return daemon

    def up(self) -> dict[str, int]:
        """Start every queue's worker at once (those running are kept), then wait for each; queue -> pid."""
        daemons = {queue: self.worker(queue) for queue in self.queues}
        pids = {queue: daemon.launch() for queue, daemon in daemons.items()}
        for daemon in daemons.values():
            daemon.wait_ready(timeout_s=START_TIMEOUT_S)
        return pids

    def down(self) -> list[str]:
        return [queue for queue in self.queues if self.worker(queue).stop()]

    def status(self) -> dict[str, DaemonStatus]:
        return {queue: self.worker(queue).status() for queue in self.queues}


def _says(daemon: Daemon, text: bytes, offset: int) -> bool:
    try:
        with daemon.log_file.open("rb") as handle:
            handle.seek(offset)
            return text in handle.read()
    except OSError:
        return False
