"""The one ASGI wrapper in front of the app: what a middleware chain would do, in one call.

Per HTTP request, in this order (as the four middlewares it replaces did):

1. metrics: the request is counted in flight and, however it ends, observed with its route
   label, status and duration (``ServerMetrics.observe_scope``);
2. auth (when tokens are configured): 401/403 before anything else (``auth.authorize``);
3. limits: 431 for heads over ``--max-header-bytes``, 429 over the rate limit
   (``limits.RequestLimits``); live-reader slots are released when the response is done;
4. the security headers (CORS, ``nosniff`` ...) on every response (``SECURITY_HEADERS``).

Then the hot routes (stream requests on ``/v1/stream/...``) go straight to their handler
(``HotRoute``: no router, no per-request middleware frames or ``send`` wrappers), and a
plain response is sent as two ASGI messages with the pre-rendered headers appended;
everything else goes through the Starlette router, whose ``send`` is wrapped once.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..protocol.tokens import AuthConfig
from .auth import admit
from .limits import LiveReaders, RequestLimits
from .metrics import ServerMetrics
from .responses import error_response, send_plain, with_security_headers

if TYPE_CHECKING:
    from .fastpath.route import FastPath

HotRoute = Callable[[Scope, Receive], Awaitable[Response | None]]
"""The response of a request the app serves without its router; ``None``: route it."""

_PLAIN = (Response, JSONResponse)


class _Secured:
    """The router's ``send``: adds the security headers and notes the status."""

    __slots__ = ("send", "status")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status = 500  # unless a response starts: the app raised

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            message["headers"] = with_security_headers(list(message.get("headers", [])))
        await self.send(message)


@dataclass(frozen=True, slots=True)
class Gate:
    router: ASGIApp
    """Everything but the hot routes (and the lifespan events)."""
    hot: HotRoute
    metrics: ServerMetrics
    auth: AuthConfig | None
    limits: RequestLimits
    live_readers: LiveReaders
    fast_path: FastPath | None = None
    """A stream's hot requests, served by the protocol class without the ASGI layers (``lean.py``, ``direct.py``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.router(scope, receive, send)  # lifespan
            return
        metrics = self.metrics
        metrics.in_flight += 1
        started = time.perf_counter()
        secured: _Secured | None = None
        status = 500  # unless a response starts: the app raised
        try:
            refusal = admit(self.auth, self.limits, scope)
            response = error_response(refusal) if refusal is not None else await self.hot(scope, receive)
            if response is None:
                secured = _Secured(send)
                await self.router(scope, receive, secured)
            elif type(response) in _PLAIN and response.background is None:
                status = response.status_code
                await send_plain(response, send)
            else:  # a streaming body (SSE)
                secured = _Secured(send)
                await response(scope, receive, secured)
        finally:
            metrics.in_flight -= 1
            self.live_readers.release(scope)
            if secured is not None:
                status = secured.status
            metrics.observe_scope(scope, status, time.perf_counter() - started)
