"""``location``: the direct Location URL equals what Starlette's ``URL`` makes of the request."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from starlette.requests import Request

from durable_streams_server.http.responses import location

HOSTS = [
    b"127.0.0.1",
    b"127.0.0.1:4437",
    b"localhost:0",
    b"example.com:65535",
    b"example.com:65536",
    b"example.com:00080",
    b"Example.COM",
    b"[::1]:8080",
    b"user@host",
    b"bad host",
    b"h%41st",
    b"",
]
PATHS = ["/v1/stream/a", "/v1/stream/ä ö/x", "/v1/stream/q?x#y\\z", "/bucket/stream", "//v1/stream/a"]


@pytest.mark.parametrize("host", [*HOSTS, None])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("suffix", ["", "/snapshot/0000000000000001_0000000000000000"])
def test_location_equals_starlettes_url(host: bytes | None, path: str, suffix: str) -> None:
    headers = [(b"content-type", b"text/plain")] + ([(b"host", host)] if host is not None else [])
    scope = {
        "type": "http",
        "scheme": "http",
        "server": ("10.0.0.1", 4437),
        "path": path,
        "query_string": b"offset=-1",
        "headers": headers,
    }
    request = Request(scope)
    expected = quote(str(request.url.replace(query="")) + suffix, safe=":/")
    assert location(request, suffix) == expected
