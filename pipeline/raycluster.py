"""Ray for the heavy steps: the cluster at ``SLUICE_RAY_ADDRESS``.

``SLUICE_RAY_ADDRESS`` unset means no Ray, for DAG runs and the CLI alike: every step runs in its own task
(or command) process, and the transcode's encoders in that process's worker pool
(:mod:`pipeline.processes`). Set (``auto`` for a cluster ``ray start`` made on this machine, ``host:port``
or ``ray://host:port``), DAG runs send the heavy steps there (:func:`pipeline.orchestrate.default_executor`)
and ``sluice ingest --executor ray`` does too. Starting a private Ray inside each Airflow task would cost
more than the batches of one machine gain, and would die with the task.

Only this module and the runner import ``ray``; everything else stays importable without it.
"""

from __future__ import annotations

import logging
import math

from pipeline.errors import ConfigError, InfrastructureError
from pipeline.steps.base import Resources

log = logging.getLogger(__name__)


class RayNotConfiguredError(ConfigError):
    """The Ray executor was asked for, but no cluster is configured."""

    def __init__(self) -> None:
        super().__init__(
            "SLUICE_RAY_ADDRESS",
            [
                (
                    "",
                    "the ray executor needs a Ray cluster: start one (`ray start --head`) and set "
                    "SLUICE_RAY_ADDRESS (e.g. auto), or use the local executor",
                )
            ],
        )


def ensure_ray(address: str | None) -> None:
    """Connect this process to the cluster at ``address`` once (quiet workers)."""
    import ray

    if ray.is_initialized():
        return
    if not address:
        raise RayNotConfiguredError()
    ray.init(address=address, log_to_driver=False)
    log.info("connected to Ray at %s: %s", address, ray.cluster_resources())


def workers_that_fit(res: Resources, n_items: int) -> int:
    """How many workers of ``res`` the cluster can run at once, capped by the items there are.

    Raises when not even one fits on any node: Ray would queue that request forever.
    """
    import ray

    fits_somewhere = False
    total = 0
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        avail = node.get("Resources", {})
        per_node = []
        if res.cpus:
            per_node.append(math.floor(avail.get("CPU", 0) / res.cpus))
        if res.gpus:
            per_node.append(math.floor(avail.get("GPU", 0) / res.gpus))
        if res.memory_bytes:
            per_node.append(math.floor(avail.get("memory", 0) / res.memory_bytes))
        count = min(per_node) if per_node else n_items
        if count > 0:
            fits_somewhere = True
            total += count
    if not fits_somewhere:
        raise InfrastructureError(
            f"no Ray node can host a worker needing {res.cpus} CPUs, {res.gpus} GPUs and "
            f"{res.memory_bytes} bytes; cluster has {ray.cluster_resources()}"
        )
    return max(1, min(total, n_items))
