"""The one-machine platform a scheduled run needs, started when it is not up and stopped afterwards.

:func:`local_platform` brings up what ``sluice run`` and the demo need: the local Postgres (unless
``SLUICE_DATABASE_URL`` names a server), the catalog migrated with its roles, Airflow's metadata DB as a
database of its own on the same server, and the local Airflow's services (API server, scheduler with the
LocalExecutor, DAG processor, triggerer) with the vendors' pools. Whatever it started, it stops when the
block ends (unless told to keep it running); what was already running is left as it was.

:func:`cluster_platform` is the same platform in cluster mode on one machine (``sluice demo --cluster``):
first the parts a multi-machine deployment adds, from ``pipeline.services`` under
``$SLUICE_HOME/services`` (the registry ``sluice services`` reads), so that ``sluice services status``
sees them: moto's S3 server, holding the store (``SLUICE_STORE_URL=s3://sluice-store`` through s3fs), Redis
as the Celery broker, and a Ray head with one worker node (``SLUICE_RAY_ADDRESS``: the heavy steps run
there). Then :func:`local_platform` with the CeleryExecutor and one Celery worker per queue the vendors'
DAGs use. The Airflow services, the Ray nodes and this process all see the S3 server through the
environment (``AWS_ENDPOINT_URL`` and a key pair), as botocore reads it: nothing names it in a config.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.airflow_local import LocalAirflow
    from pipeline.services.celery import CeleryWorkers
    from pipeline.services.raynodes import RayCluster
    from pipeline.settings import Settings

log = logging.getLogger(__name__)

#: The bucket that holds the store in cluster mode (raw/, derived/, shards/, manifests/ under it).
CLUSTER_STORE_BUCKET = "sluice-store"


@dataclass
class Platform:
    """The running platform: its Airflow, and which parts this process started."""

    settings: Settings
    airflow: LocalAirflow
    started: list[str] = field(default_factory=list)  # "postgres", "airflow", "celery", "s3", ...
    workers: CeleryWorkers | None = None  # the Celery workers, on the CeleryExecutor
    ray: RayCluster | None = None  # the Ray cluster the heavy steps run on, in cluster mode


@contextlib.contextmanager
def local_platform(
    settings: Settings,
    *,
    keep_running: bool = False,
    port: int | None = None,
    say: Callable[[str], None] = log.info,
    celery_broker: str | None = None,
) -> Iterator[Platform]:
    """Start what is not up (see the module docstring), yield it, stop what was started here.

    ``port`` asks for the API server's port (default 8080, or a free one). ``say`` hears one line per part
    as it comes up or goes down (the CLI prints them). ``celery_broker`` (a Redis URL) runs the scheduler
    with the CeleryExecutor on that broker, with one Celery worker per queue the vendors' DAGs use.
    """
    from pipeline.airflow_local import (
        AirflowLocalError,
        LocalAirflow,
        metadata_database_url,
        pools_from_vendors,
    )
    from pipeline.config import VendorConfig, load_vendors
    from pipeline.orchestrate.vendors import vendors_folder
    from pipeline.pgserver import local_cluster, migrate_catalog
    from pipeline.services.celery import CeleryWorkers, celery_overrides, queues_of

    platform: Platform | None = None
    cluster = local_cluster(settings)
    started: list[str] = []
    try:
        if not settings.database_url and not cluster.status().running:
            cluster.up()
            started.append("postgres")
            say(f"Postgres started on 127.0.0.1:{cluster.status().port} ({cluster.data_dir})")
        migrate_catalog(settings)
        metadata = metadata_database_url(settings)
        overrides = celery_overrides(celery_broker, metadata) if celery_broker else None
        airflow = LocalAirflow.from_settings(
            settings, metadata_url=metadata, port=port, config_overrides=overrides
        )
        platform = Platform(settings, airflow, started)
        loaded = load_vendors(vendors_folder(settings), base_dir=settings.project_dir_abs)
        vendors = [v for v in loaded.values() if isinstance(v, VendorConfig)]
        pools = pools_from_vendors(vendors)
        if airflow.status().running and celery_broker:
            # Its services run with the executor, store and Ray address they were started with.
            raise AirflowLocalError(
                f"the local Airflow in {airflow.home} already runs; cluster mode starts its own on the "
                "CeleryExecutor: stop it first with `sluice airflow down`"
            )
        if airflow.status().running:
            airflow.up(pools=pools)  # healthy, pools as the vendor files say now
            say(f"Airflow already running at {airflow.url}")
        else:
            say("starting Airflow (metadata DB migrated, pools set; about a minute on 2 cores)…")
            airflow.up(pools=pools)
            started.append("airflow")
            say(f"Airflow up at {airflow.url} (log in as admin, password in {airflow.password_file})")
        if celery_broker:
            platform.workers = CeleryWorkers(
                airflow, queues_of(vendors, {n: p.slots for n, p in pools.items()})
            )
            say("starting a Celery worker per queue…")
            platform.workers.up()
            started.append("celery")
            say(
                "Celery workers up: "
                + ", ".join(f"{q} (concurrency {n})" for q, n in platform.workers.queues.items())
                + f", broker {celery_broker}"
            )
        yield platform
    finally:
        if not keep_running:
            if platform is not None and platform.workers is not None and "celery" in started:
                platform.workers.down()
                say("Celery workers stopped")
            if platform is not None and "airflow" in started:
                platform.airflow.down()
                say("Airflow stopped")
            if "postgres" in started:
                cluster.down()
                say("Postgres stopped")
        elif started:
            say(f"left running: {', '.join(started)} (`sluice airflow down`, `sluice db down` stop them)")


@contextlib.contextmanager
def cluster_platform(
    settings: Settings, *, keep_running: bool = False, say: Callable[[str], None] = log.info
) -> Iterator[Platform]:
    """Cluster mode on one machine (see the module docstring): the services, then the platform on them.

    The platform's settings are ``settings`` with the store on ``s3://sluice-store`` and the Ray address;
    the Airflow services inherit both (``SLUICE_STORE_URL``, ``SLUICE_RAY_ADDRESS``).
    """
    from pipeline.services.registry import ray_cluster, redis_server, s3_server
    from pipeline.services.s3server import client_environment, make_buckets

    home = settings.home_abs
    s3, redis, ray = s3_server(home), redis_server(home), ray_cluster(home)
    started: list[str] = []
    try:
        if s3.daemon.live_pid() is None:
            started.append("s3")
        say(f"S3 server (moto) at {s3.up()}, the store in s3://{CLUSTER_STORE_BUCKET}")
        # Before the Ray nodes and the Airflow services start: they inherit it, and so do their tasks.
        with client_environment(s3):
            make_buckets(CLUSTER_STORE_BUCKET)
            if redis.daemon.live_pid() is None:
                started.append("redis")
            say(f"Redis (Celery broker) at {redis.up()}")
            if not ray.running():
                started.append("ray")
                say("starting a Ray head (1 CPU) and worker node (minutes on a loaded 2-core machine)…")
            ray.up()
            nodes = ", ".join(f"{name} {node[:12]}" for node, name in sorted(ray.alive_nodes().items()))
            say(f"Ray cluster at {ray.address}: {nodes or 'nodes not listed'}")
            on_cluster = settings.model_copy(
                update={"store_url": f"s3://{CLUSTER_STORE_BUCKET}", "ray_address": ray.address}
            )
            with local_platform(
                on_cluster, keep_running=keep_running, say=say, celery_broker=redis.url
            ) as platform:
                platform.ray = ray
                platform.started[:0] = started
                yield platform
    finally:
        if not keep_running:
            for name, part in (("ray", ray), ("redis", redis), ("s3", s3)):
                if name in started:
                    part.down()
                    say(f"{name} stopped")
        elif started:
            say(f"left running: {', '.join(started)} (`sluice services down` stops them)")


__all__ = ["CLUSTER_STORE_BUCKET", "Platform", "cluster_platform", "local_platform"]
