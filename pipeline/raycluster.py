"""Ray for the heavy steps: a local Ray on one machine, the cluster at ``SLUICE_RAY_ADDRESS`` on many.

Only this module and the runner import ``ray``; everything else stays importable without it.
"""

from __future__ import annotations

import logging
import math

from pipeline.errors import InfrastructureError
from pipeline.steps.base import Resources

log = logging.getLogger(__name__)

#: Ray's object store takes a share of memory per node; on a 2-core test machine keep it small so that
#: the workers' own memory requests fit.
LOCAL_OBJECT_STORE_BYTES = 256 << 20


def ensure_ray(address: str | None) -> None:
    """Connect to ``address`` or start a local Ray once per process (no dashboard, quiet workers)."""
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False)
        log.info("connected to Ray at %s", address)
    else:
        ray.init(
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            configure_logging=False,
        )
        log.info("started a local Ray: %s", ray.cluster_resources())


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
