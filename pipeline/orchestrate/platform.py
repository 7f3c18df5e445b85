"""The one-machine platform a scheduled run needs, started when it is not up and stopped afterwards.

:func:`local_platform` brings up what ``sluice run`` and the demo need: the local Postgres (unless
``SLUICE_DATABASE_URL`` names a server), the catalog migrated with its roles, Airflow's metadata DB as a
database of its own on the same server, and the local Airflow's services (API server, scheduler with the
LocalExecutor, DAG processor, triggerer) with the vendors' pools. Whatever it started, it stops when the
block ends (unless told to keep it running); what was already running is left as it was.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.airflow_local import LocalAirflow
    from pipeline.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Platform:
    """The running platform: its Airflow, and which parts this process started."""

    settings: Settings
    airflow: LocalAirflow
    started: list[str] = field(default_factory=list)  # "postgres", "airflow"


@contextlib.contextmanager
def local_platform(
    settings: Settings,
    *,
    keep_running: bool = False,
    port: int | None = None,
    say: Callable[[str], None] = log.info,
) -> Iterator[Platform]:
    """Start what is not up (see the module docstring), yield it, stop what was started here.

    ``port`` asks for the API server's port (default 8080, or a free one). ``say`` hears one line per part
    as it comes up or goes down (the CLI prints them).
    """
    from pipeline.airflow_local import LocalAirflow, metadata_database_url, pools_from_vendors
    from pipeline.config import VendorConfig, load_vendors
    from pipeline.orchestrate.vendors import vendors_folder
    from pipeline.pgserver import local_cluster, migrate_catalog

    platform: Platform | None = None
    cluster = local_cluster(settings)
    started: list[str] = []
    try:
        if not settings.database_url and not cluster.status().running:
            cluster.up()
            started.append("postgres")
            say(f"Postgres started on 127.0.0.1:{cluster.status().port} ({cluster.data_dir})")
        migrate_catalog(settings)
        airflow = LocalAirflow.from_settings(
            settings, metadata_url=metadata_database_url(settings), port=port
        )
        platform = Platform(settings, airflow, started)
        vendors = load_vendors(vendors_folder(settings), base_dir=settings.project_dir_abs)
        pools = pools_from_vendors(v for v in vendors.values() if isinstance(v, VendorConfig))
        if airflow.status().running:
            airflow.up(pools=pools)  # healthy, pools as the vendor files say now
            say(f"Airflow already running at {airflow.url}")
        else:
            say("starting Airflow (metadata DB migrated, pools set; about a minute on 2 cores)…")
            airflow.up(pools=pools)
            started.append("airflow")
            say(f"Airflow up at {airflow.url} (log in as admin, password in {airflow.password_file})")
        yield platform
    finally:
        if not keep_running:
            if platform is not None and "airflow" in started:
                platform.airflow.down()
                say("Airflow stopped")
            if "postgres" in started:
                cluster.down()
                say("Postgres stopped")
        elif started:
            say(f"left running: {', '.join(started)} (`sluice airflow down`, `sluice db down` stop them)")


__all__ = ["Platform", "local_platform"]
