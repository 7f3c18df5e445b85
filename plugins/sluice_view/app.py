"""The Sluice view's routes: overview, vendor, run, lineage. Each is one read of the catalog, rendered to HTML.

Handlers are plain ``def`` functions: FastAPI runs them in its thread pool, so the blocking catalog reads
and matplotlib never stall the API server's event loop.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from sluice_view.auth import login_url, require_viewer

log = logging.getLogger(__name__)

#: Where the app is mounted on the API server, and the UI route of its page (``/plugin/sluice``).
URL_PREFIX = "/sluice"
URL_ROUTE = "sluice"
#: The navigation icon: a sluice gate over water, in the UI's blue.
ICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#017cee" '
    'stroke-width="2" stroke-linecap="round"><path d="M4 3v13M20 3v13M4 6h16"/>'
    '<rect x="7" y="6" width="10" height="6" rx="1"/>'
    '<path d="M2 17c2 1.5 4 1.5 6 0s4-1.5 6 0 4 1.5 6 0M2 21c2 1.5 4 1.5 6 0s4-1.5 6 0 4 1.5 6 0"/></svg>'
)


def _sources() -> Any:
    from pipeline.settings import load_settings
    from pipeline.ui.source import view_sources

    return view_sources(load_settings())


def _page(name: str, data: dict[str, Any]) -> HTMLResponse:
    from pipeline.ui.render import render

    return HTMLResponse(render(name, data), headers={"Cache-Control": "no-store"})


def _error(title: str, message: str, code: int) -> HTMLResponse:
    from pipeline.ui.render import render

    return HTMLResponse(render("error", {"title": title, "message": message}), status_code=code)


def create_app() -> FastAPI:
    """The view's FastAPI app; every route requires an Airflow login (:func:`require_viewer`)."""
    app = FastAPI(
        title="Sluice",
        dependencies=[Depends(require_viewer)],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == status.HTTP_401_UNAUTHORIZED:
            return RedirectResponse(login_url(request), status_code=status.HTTP_303_SEE_OTHER)
        return _error("Sluice", str(exc.detail), exc.status_code)

    @app.get("/icon.svg")
    def icon() -> Response:
        return Response(ICON_SVG, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

    @app.get("/", response_class=HTMLResponse)
    def overview() -> HTMLResponse:
        from pipeline.ui.pages import overview as gather

        return _guarded(lambda: _page("overview", gather(_sources())))

    @app.get("/vendor", response_class=HTMLResponse)
    def vendor(name: str = Query(..., min_length=1)) -> HTMLResponse:
        from pipeline.ui.pages import vendor_page

        return _guarded(lambda: _page("vendor", vendor_page(_sources(), name)))

    @app.get("/run", response_class=HTMLResponse)
    def run(id: int = Query(..., ge=1)) -> HTMLResponse:
        from pipeline.ui.pages import run_page

        return _guarded(lambda: _page("run", run_page(_sources(), id)))

    @app.get("/lineage", response_class=HTMLResponse)
    def lineage(ref: str | None = Query(None, max_length=2000)) -> HTMLResponse:
        from pipeline.ui.pages import lineage_page

        return _guarded(lambda: _page("lineage", lineage_page(_sources(), ref)))

    return app


def _guarded(make: Any) -> HTMLResponse:
    """The page, or an error page: not found (404), the catalog unreachable (503), other product errors."""
    from pipeline.catalog.errors import CatalogMissingError
    from pipeline.errors import InfrastructureError, SluiceError

    try:
        return make()
    except CatalogMissingError as exc:
        return _error("Not found", str(exc), status.HTTP_404_NOT_FOUND)
    except InfrastructureError as exc:
        log.warning("sluice view: %s", exc)
        return _error("Catalog unavailable", str(exc), status.HTTP_503_SERVICE_UNAVAILABLE)
    except SluiceError as exc:
        return _error("Sluice", str(exc), status.HTTP_400_BAD_REQUEST)
