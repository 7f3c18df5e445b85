"""The view's login redirect names a page of this server, never a host the client sent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from starlette.requests import Request

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))
from sluice_view.auth import next_path


def _request(path: str, query: str = "", host: str = "evil.example", root_path: str = "") -> Request:
    scope = {
        "type": "http",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": root_path,
        "query_string": query.encode(),
        "headers": [(b"host", host.encode())],
        "server": ("127.0.0.1", 8080),
    }
    return Request(scope)


@pytest.mark.parametrize(
    ("path", "query", "root_path", "expected"),
    [
        ("/sluice/vendor", "name=acme", "/sluice", "/sluice/vendor?name=acme"),  # mounted: path is whole
        ("/sluice/", "", "/sluice", "/sluice/"),
        ("//evil.example/x", "", "", "/evil.example/x"),
    ],
)
def test_the_next_page_is_a_path_on_this_server(path: str, query: str, root_path: str, expected: str) -> None:
    got = next_path(_request(path, query, root_path=root_path))
    assert got == expected
    assert not got.startswith("//") and "://" not in got
