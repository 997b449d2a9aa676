"""Response plumbing shared by every route: error bodies, browser security headers, CORS."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Send

from ..protocol.errors import ProtocolError

ALLOWED_METHODS = "GET, POST, PUT, DELETE, HEAD, OPTIONS"
ALLOWED_HEADERS = (
    "Content-Type, Authorization, If-None-Match, Stream-Seq, Stream-TTL, Stream-Expires-At, Stream-Closed, "
    "Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset"
)
EXPOSED_HEADERS = (
    "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, Stream-Expires-At, "
    "Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, "
    "Stream-Incarnation, Stream-Bulk-Append, ETag, Content-Type, Location"
)


def error_response(error: ProtocolError) -> Response:
    """The one rendering of every protocol error: JSON body, its headers, ``Retry-After``."""
    body = json.dumps({"error": {"code": error.code, "message": error.message}}).encode()
    headers = dict(error.headers)
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(error.retry_after_s)
    return Response(body, status_code=error.status, headers=headers, media_type="application/json")


async def http_error_response(_: Request, exc: Exception) -> Response:
    """The router's own answers (no route: 404, method not routed: 405) in the same JSON shape."""
    assert isinstance(exc, HTTPException)
    error = ProtocolError(exc.detail, code=_ROUTER_CODES.get(exc.status_code, "HTTP_ERROR"), headers=exc.headers)
    error.status = exc.status_code
    return error_response(error)


_ROUTER_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}


def preflight_response() -> Response:
    return Response(
        status_code=204,
        headers={
            "Access-Control-Allow-Methods": ALLOWED_METHODS,
            "Access-Control-Allow-Headers": ALLOWED_HEADERS,
            "Access-Control-Max-Age": "86400",
        },
    )


SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"access-control-allow-origin", b"*"),
    (b"access-control-expose-headers", EXPOSED_HEADERS.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-resource-policy", b"cross-origin"),
]
"""CORS and browser-hardening headers of every response, errors included (pre-rendered)."""
_SECURITY_NAMES = frozenset(name for name, _ in SECURITY_HEADERS)


SECURITY_HEAD = b"".join(b"%s: %s\r\n" % pair for pair in SECURITY_HEADERS)
"""``SECURITY_HEADERS`` as lines of a response head, for responses that set none of them."""


UNSAFE_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
"""Header values uvicorn refuses to render (a control character could split the head)."""
_UNSAFE_TEXT = re.compile(UNSAFE_VALUE.pattern.decode("ascii"))


def head_lines(headers: Mapping[str, str]) -> bytes | None:
    """``headers`` as lines of a response head, as Starlette's ``Response`` renders them (names
    lower-cased, latin-1); ``None`` if a value is one uvicorn would refuse to write."""
    if _UNSAFE_TEXT.search("".join(headers.values())):
        return None
    return "".join([f"{name.lower()}: {value}\r\n" for name, value in headers.items()]).encode("latin-1")


def sets_security_header(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() in _SECURITY_NAMES for name, _ in headers)


def with_security_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` plus those of ``SECURITY_HEADERS`` it does not set itself."""
    if not sets_security_header(headers):
        return headers + SECURITY_HEADERS
    present = {name.lower() for name, _ in headers}
    return headers + [(name, value) for name, value in SECURITY_HEADERS if name not in present]


async def send_plain(response: Response, send: Send) -> None:
    """A response whose body is all there (no background task) as its two ASGI messages,
    with the security headers."""
    headers = with_security_headers(response.raw_headers)
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})
