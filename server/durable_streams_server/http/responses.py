"""Response plumbing shared by every route: error bodies, CORS preflights, head lines, locations.

(The security headers every response gets are the request policy's: ``request_policy.py``.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import quote

from starlette.datastructures import URL
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..protocol.errors import ProtocolError, rendered

ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"
ALLOWED_HEADERS = (
    "Content-Type, Authorization, If-None-Match, If-Match, Stream-Seq, Stream-TTL, Stream-Expires-At, Stream-Closed, "
    "Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset, "
    "Stream-Retention-Max-Age, Stream-Retention-Max-Bytes, Stream-Retention-Max-Messages"
)
EXPOSED_HEADERS = (
    "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, Stream-Expires-At, "
    "Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, "
    "Stream-Incarnation, Stream-Bulk-Append, Stream-Conditional-Append, ETag, Content-Type, Location, "
    "Stream-Retention-Max-Age, Stream-Retention-Max-Bytes, Stream-Retention-Max-Messages, Stream-Earliest-Offset, "
    "Stream-Retained-Bytes"
)


class PartsResponse(Response):
    """A 200 whose body is ``parts`` written end to end, none copied into one buffer (a binary
    read's body: views of the Arrow buffers a Delta read decoded, ``engine.reads.read_body``).
    The fast path writes them in one vectored write (``FastCycle._send``); through the ASGI app
    each part is a body message of its own."""

    def __init__(self, parts: Sequence[bytes | memoryview], headers: Mapping[str, str]) -> None:
        self.parts = parts
        length = str(sum(len(part) for part in parts))
        super().__init__(None, status_code=200, headers={**headers, "Content-Length": length})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        if scope["method"] != "HEAD":
            for part in self.parts:
                await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def error_response(error: ProtocolError) -> Response:
    """A protocol error as the app's response (the one rendering: ``protocol.errors.rendered``)."""
    body, headers = rendered(error)
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


UNSAFE_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
"""Header values uvicorn refuses to render (a control character could split the head)."""
_UNSAFE_TEXT = re.compile(UNSAFE_VALUE.pattern.decode("ascii"))


def head_lines(headers: Mapping[str, str]) -> bytes | None:
    """``headers`` as lines of a response head, as Starlette's ``Response`` renders them (names
    lower-cased, latin-1); ``None`` if a value is one uvicorn would refuse to write."""
    if _UNSAFE_TEXT.search("".join(headers.values())):
        return None
    return "".join([f"{name.lower()}: {value}\r\n" for name, value in headers.items()]).encode("latin-1")


_PLAIN_HOST_RE = re.compile(rb"[A-Za-z0-9.-]+(?::(0|[1-9][0-9]{0,4}))?")


def location(scope: Scope, suffix: str = "") -> str:
    """The request's URL (plus ``suffix``) for a Location header: percent-encoded, since
    stream ids may be any UTF-8 and header values must be ASCII.

    A plain ``Host`` header (name or IPv4 address, optional port) gives the URL directly;
    anything else goes through Starlette's ``URL``, whose answer the direct one equals."""
    host = next((value for name, value in scope["headers"] if name == b"host"), None)
    if host is not None and (plain := _PLAIN_HOST_RE.fullmatch(host)) is not None:
        port = plain.group(1)
        if port is None or int(port) <= 65535:
            path = scope["path"].replace("?", "%3F").replace("#", "%23").replace("\\", "%5C")
            return quote(f"{scope.get('scheme', 'http')}://{host.decode('ascii')}{path}{suffix}", safe=":/")
    return quote(str(URL(scope=scope).replace(query="")) + suffix, safe=":/")
