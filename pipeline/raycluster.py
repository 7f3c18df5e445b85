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
import os
import socket

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


class RayUnreachableError(InfrastructureError):
    """No Ray head answers at the configured ``host:port``."""

    def __init__(self, address: str, why: str) -> None:
        self.address = address
        super().__init__(
            f"no Ray head answers at SLUICE_RAY_ADDRESS={address} ({why}): start one with "
            "`sluice services up ray`, or unset SLUICE_RAY_ADDRESS to run without Ray"
        )


#: How long the head's GCS port gets to accept a connection. ``ray.init`` itself waits for a GCS that is
#: gone for 10+ minutes (its own retries, printing only ``Failed to get cluster ID``); a live head on any
#: network Sluice runs on answers a TCP connect in well under a second.
GCS_CONNECT_TIMEOUT_S = 5.0

#: The driver's storage settings that the Ray workers need too: botocore (under s3fs) reads them from the
#: environment of the process it runs in, and a Ray worker's environment is the one its node was started
#: with (``sluice services up ray`` may have run before the user exported these). Steps get every
#: ``SLUICE_*`` setting from the pickled :class:`pipeline.settings.Settings`, so none of those is needed.
WORKER_ENV_VARS = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_PROFILE",
)


def ensure_ray(address: str | None) -> None:
    """Connect this process to the cluster at ``address`` once (quiet workers), its workers seeing the
    driver's storage settings (:data:`WORKER_ENV_VARS`).

    The settings travel as the job's ``runtime_env`` ``env_vars``, Ray's mechanism for a job on a cluster
    that is already running: they apply to every task and actor of this driver and override the node's own
    environment. Ray keeps them in the job's config, so its dashboard and its ``runtime_env_agent.log``
    on each node show the values (ray-project/ray#28276); only the names are logged here.
    """
    import ray

    if ray.is_initialized():
        return
    if not address:
        raise RayNotConfiguredError()
    _check_gcs_answers(address)
    env_vars = {name: os.environ[name] for name in WORKER_ENV_VARS if os.environ.get(name)}
    ray.init(
        address=address,
        log_to_driver=False,
        runtime_env={"env_vars": env_vars} if env_vars else None,
    )
    log.info(
        "connected to Ray at %s: %s; workers get %s from this environment",
        address,
        ray.cluster_resources(),
        ", ".join(sorted(env_vars)) or "no storage settings",
    )


def _check_gcs_answers(address: str) -> None:
    """Raise :class:`RayUnreachableError` unless the GCS port of a ``host:port`` address accepts a TCP
    connection within :data:`GCS_CONNECT_TIMEOUT_S`. ``auto`` (found through this machine's session files)
    and ``ray://`` (Ray Client, which bounds its own connect) are left to ``ray.init``."""
    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return  # not host:port; ray.init names what is wrong with it
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=GCS_CONNECT_TIMEOUT_S):
            pass
    except TimeoutError:
        raise RayUnreachableError(address, f"no answer within {GCS_CONNECT_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise RayUnreachableError(address, exc.strerror or type(exc).__name__) from None


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
