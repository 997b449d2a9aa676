"""The one ASGI wrapper in front of the app: the request policy, then the routes, in one call.

Per HTTP request the gate applies the request policy (``request_policy.RequestPolicy``: admit,
observe, decorate -- what a middleware chain would do) around the routes: a refusal is answered
at once; the base route's stream requests (``/v1/stream/...``) go straight to their handler
(``BaseRoute``: no router, no per-request middleware frames or ``send`` wrappers), and a plain
response is sent as two ASGI messages with the security headers added; everything else goes
through the Starlette router, whose ``send`` is wrapped once to add them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .request_policy import RequestPolicy, decorate

BaseRoute = Callable[[Scope, Receive], Awaitable[Response | None]]
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
            message["headers"] = decorate(list(message.get("headers", [])))
        await self.send(message)


async def _send_plain(response: Response, send: Send) -> None:
    """A response whose body is all there (no background task) as its two ASGI messages."""
    await send(
        {"type": "http.response.start", "status": response.status_code, "headers": decorate(response.raw_headers)}
    )
    await send({"type": "http.response.body", "body": response.body})


@dataclass(frozen=True, slots=True)
class Gate:
    router: ASGIApp
    """Everything but the base route's stream requests (and the lifespan events)."""
    base_route: BaseRoute
    policy: RequestPolicy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.router(scope, receive, send)  # lifespan
            return
        policy = self.policy
        started = policy.begin()
        secured: _Secured | None = None
        status = 500  # unless a response starts: the app raised
        try:
            response = policy.admit(scope)
            if response is None:
                response = await self.base_route(scope, receive)
            if response is None:
                secured = _Secured(send)
                await self.router(scope, receive, secured)
            elif type(response) in _PLAIN and response.background is None:
                status = response.status_code
                await _send_plain(response, send)
            else:  # a streaming body (SSE)
                secured = _Secured(send)
                await response(scope, receive, secured)
        finally:
            policy.end(scope, status if secured is None else secured.status, started)
