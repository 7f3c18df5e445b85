"""The Sluice plugin: a "Sluice" entry in the Airflow UI's navigation showing what happened to the data.

Airflow 3 plugins no longer add Flask views: this one mounts a small FastAPI app on the API server
(``fastapi_apps``, under ``/sluice``) and lists it as an external view (``external_views``), which the UI shows
inside its own page at ``/plugin/sluice``. Airflow does not authenticate plugin apps; the app does it itself
with Airflow's auth manager on every request (:mod:`sluice_view.auth`), so the view stays behind the same
login as the rest of the UI.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from sluice_view.app import URL_PREFIX, URL_ROUTE, create_app


class SluicePlugin(AirflowPlugin):
    name = "sluice"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Sluice"}]  # noqa: RUF012
    external_views = [  # noqa: RUF012
        {
            "name": "Sluice",
            # Relative: the UI resolves it against its own base URL, so a base_url prefix keeps working.
            "href": URL_PREFIX.lstrip("/") + "/",
            "url_route": URL_ROUTE,
            "icon": URL_PREFIX.lstrip("/") + "/icon.svg",
            "destination": "nav",
            "nav_top_level": True,
        }
    ]
