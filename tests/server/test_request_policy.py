"""The request policy's decorate step: the ASGI path's header pairs and the fast path's head
lines are one decision rendered twice (``http/request_policy.py``)."""

from __future__ import annotations

import pytest

from durable_streams_server.http.request_policy import (
    SECURITY_HEADERS,
    decorate,
    missing_security_headers,
    security_lines,
)

Headers = list[tuple[bytes, bytes]]


def _lines(headers: Headers) -> bytes:
    return b"".join(b"%s: %s\r\n" % pair for pair in headers)


@pytest.mark.parametrize(
    "own",
    [
        [],
        [(b"content-type", b"text/plain")],
        [(b"x-content-type-options", b"custom")],
        [(b"Access-Control-Allow-Origin", b"https://example.com"), (b"etag", b'"e"')],
        list(SECURITY_HEADERS),
    ],
)
def test_both_renderings_add_the_same_headers_in_the_same_order(own: Headers) -> None:
    decorated = decorate(own)
    assert decorated[: len(own)] == own  # (the response's own first, as it set them)
    assert _lines(decorated) == _lines(own) + security_lines(own)


def test_a_header_the_response_sets_itself_is_not_added_again() -> None:
    own = [(b"X-Content-Type-Options", b"custom")]
    names = [name.lower() for name, _ in decorate(own)]
    assert names.count(b"x-content-type-options") == 1
    assert [name for name, _ in missing_security_headers(own)] == [
        b"access-control-allow-origin",
        b"access-control-expose-headers",
        b"cross-origin-resource-policy",
    ]
    assert missing_security_headers([(b"etag", b'"e"')]) is SECURITY_HEADERS
    assert missing_security_headers(list(SECURITY_HEADERS)) == []
