"""Relaying one request to a shard's server, for what a redirect cannot carry.

A 307 lets the client repeat its request at the shard's server, so the bytes pass through
one process. Not every client can follow one, so the router redirects only where it works:

* reads and other requests without a body (``GET``, ``HEAD``, ``DELETE``) without
  credentials: every HTTP client follows those;
* every request of a client that says it follows redirects itself, with its credentials
  and body (``FOLLOWS_HEADER: follow``; this project's Python client sends it).

A client that must stay on the node it asked says ``FOLLOWS_HEADER: relay`` (the status page:
a page's requests all go to its own origin). Everything else is relayed too: the same method,
headers (the client's ``Host`` included) and body, streamed both ways (long-polls and SSE
too). A relay has deadlines: ``CONNECT_TIMEOUT_S`` to reach the shard's server, and
``read_timeout_s`` between two pieces of its answer (longer than a long-poll's wait and an
SSE connection's life, the longest silences a healthy server keeps).

What a failed relay answers depends on whether the request reached the shard's server
(``RelayFailure``): one that was never sent (no connection) is a plain "later" (503 with
``Retry-After``: every client asks again, and a plain append is safe to resend), while one
whose answer was lost after it was sent may have been stored (502 ``RELAY_IN_DOUBT``, no
``Retry-After``): an idempotent producer or a ``Stream-Seq`` append asks again safely, a plain
append must not be resent blindly, as after any lost answer.
Measured reasons: ``fetch`` (the official clients, browsers) drops ``Authorization`` on a
redirect to another origin (the shard's server then answers 401), and Node 20's fetch fails
to repeat a typed-array body after a 307 (``Cannot perform ArrayBuffer.prototype.slice on a
detached ArrayBuffer``). The reserved ``__ds`` namespace (subscriptions) is always relayed:
its answers carry absolute URLs (``jwks_url``) built from the ``Host`` the client used,
which must be the node it asked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
from starlette.types import Receive, Scope, Send

HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailers"}
    | {b"transfer-encoding", b"upgrade"}
)
"""Headers of one connection, not of the message (RFC 9110 7.6.1)."""


FOLLOWS_HEADER = "durable-streams-redirects"
_FOLLOWS = FOLLOWS_HEADER.encode()
_BODYLESS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})


def must_relay(scope: Scope, reserved: bool) -> bool:
    """Whether a request is relayed rather than redirected (module docstring)."""
    if reserved:
        return True
    headers = scope["headers"]
    asked = next((value.strip().lower() for name, value in headers if name == _FOLLOWS), None)
    if asked == b"relay":
        return True
    if asked == b"follow":
        return False
    return scope["method"] not in _BODYLESS or any(name == b"authorization" for name, _ in headers)


CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0
"""The silence allowed between two pieces of a relayed answer when none is given: twice the
server's default SSE connection life (60 s), the longest silence a healthy shard server keeps
(``relay_read_timeout_s``)."""


def relay_read_timeout_s(long_poll_timeout_ms: int, sse_reconnect_ms: int) -> float:
    """Twice the longest a healthy shard server stays silent on a request: a long-poll's wait,
    or an SSE connection's life (the node's shard servers run with the node's own settings)."""
    return 2 * max(long_poll_timeout_ms, sse_reconnect_ms) / 1000


@dataclass(frozen=True)
class RelayFailure:
    """Why a relay gave no answer: ``sent`` says whether the request may have reached the shard's server."""

    sent: bool
    error: str


class Relay:
    """Relays requests to shard servers over one pooled HTTP client."""

    def __init__(self, read_timeout_s: float = READ_TIMEOUT_S) -> None:
        # (idle connections are dropped before a shard server's 5 s keep-alive timeout would close them under a request)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=2.0)
        timeout = httpx.Timeout(read_timeout_s, connect=CONNECT_TIMEOUT_S)
        self.client = httpx.AsyncClient(timeout=timeout, follow_redirects=False, limits=limits)

    async def close(self) -> None:
        await self.client.aclose()

    async def relay(self, scope: Scope, receive: Receive, send: Send, target: str) -> RelayFailure | None:
        """Relay the request to ``target`` (an absolute URL) and stream its answer back;
        a ``RelayFailure`` if no answer came (nothing was sent back: the caller answers)."""
        headers = [(name, value) for name, value in scope["headers"] if name.lower() not in HOP_BY_HOP]
        method = scope["method"]
        body = _body(receive) if method not in ("GET", "HEAD", "OPTIONS") else None
        request = self.client.build_request(method, target, headers=headers, content=body)
        try:
            response = await self.client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return RelayFailure(sent=False, error=f"{type(exc).__name__}: {exc}")
        except httpx.TransportError as exc:
            return RelayFailure(sent=True, error=f"{type(exc).__name__}: {exc}")
        try:
            pairs = [(name.lower(), value) for name, value in response.headers.raw if name.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": pairs})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()
        return None


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return
