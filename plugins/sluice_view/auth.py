"""Authentication and authorisation of the Sluice view with Airflow's own auth manager.

A plugin's FastAPI app is mounted beside Airflow's API and inherits none of its dependencies, so every
route of the view depends on :func:`require_viewer`: the caller must carry a valid Airflow token (the UI's
``_token`` cookie, or a bearer token) and be allowed to see the custom view :data:`RESOURCE_NAME`.
"""

from __future__ import annotations

from fastapi import HTTPException, Request, status

#: The name the auth manager is asked about (``is_authorized_custom_view``).
RESOURCE_NAME = "Sluice"


async def require_viewer(request: Request) -> None:
    """Raise 401 without a valid Airflow login, 403 when the user may not see the view."""
    # Imported per call: importing Airflow's API security module pulls in the models, which the scheduler
    # and DAG processor (they load plugins too) do not need from this module.
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    credentials = await bearer_scheme(request)
    user = await get_user(request, None, credentials)
    if not get_auth_manager().is_authorized_custom_view(method="GET", resource_name=RESOURCE_NAME, user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden: not allowed to see the Sluice view")
    request.state.sluice_user = user.get_name()


def login_url(request: Request) -> str:
    """Airflow's login page, coming back to the page asked for."""
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager().get_url_login(next_url=next_path(request))


def next_path(request: Request) -> str:
    """The page asked for as a path on this server (path and query; Starlette's path includes the mount
    point), never a full URL: the scheme and host of ``request.url`` come from the client's ``Host``
    header, and a login page that follows ``next`` would send the user to whatever host a link named (an
    open redirect)."""
    path = "/" + request.url.path.lstrip("/")  # "//evil.example" is a URL with a host, not a path
    return f"{path}?{request.url.query}" if request.url.query else path
