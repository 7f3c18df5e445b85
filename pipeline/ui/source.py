"""Where the view connects: the catalog as the curation reader (read-only), and the warehouse file.

Called by an entry point (the Airflow plugin, the CLI) with the :class:`~pipeline.settings.Settings` it
loaded; nothing here reads the environment.
"""

from __future__ import annotations

import json
import logging
import threading

from sqlalchemy.engine import Engine

from pipeline.settings import Settings
from pipeline.ui.pages import ViewSources

log = logging.getLogger(__name__)

#: File beside the local cluster that ``sluice db migrate`` writes with the two roles' passwords.
ROLES_FILE = "roles.json"

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def reader_url(settings: Settings) -> str:
    """The catalog URL the view reads with.

    On the local cluster: the curation reader role (SELECT only), whose password ``sluice db migrate`` keeps
    beside the cluster; the cluster's owner only when the roles were never set up. With
    ``SLUICE_DATABASE_URL``: that URL (point it at a read-only role). Either way the engine's transactions are
    read-only (:func:`pipeline.catalog.views.read_only_engine`).
    """
    from pipeline.catalog.roles import role_urls
    from pipeline.pgserver import local_cluster

    if settings.database_url:
        return settings.database_url
    cluster = local_cluster(settings)
    admin_url = cluster.url()
    secrets_file = cluster.root / ROLES_FILE
    try:
        passwords = json.loads(secrets_file.read_text())
    except FileNotFoundError:
        log.warning(
            "no %s: reading the catalog as its owner (run `sluice db migrate` for the reader)", secrets_file
        )
        return admin_url
    return role_urls(admin_url, passwords["writer"], passwords["reader"]).reader_url


def view_sources(settings: Settings) -> ViewSources:
    """The view's sources for ``settings``; engines are kept per URL (a restarted local cluster gets a new
    port, hence a new URL and engine)."""
    from pipeline.catalog.views import read_only_engine

    url = reader_url(settings)
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = read_only_engine(url)
    return ViewSources(engine=engine, warehouse_path=settings.warehouse_path)
