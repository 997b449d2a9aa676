"""Forwarding headers on the fast path, with uvicorn's meaning (``Forwarded``).

Behind a load balancer every request carries ``X-Forwarded-For`` (and often
``X-Forwarded-Proto``). uvicorn reads them in its proxy-headers middleware, which it puts in
front of the app: when the connection's peer is a trusted proxy (``--forwarded-allow-ips``),
the client address becomes the one the proxies forwarded (the nearest untrusted hop) and the
scheme the forwarded one. The request policy's rate limit charges that client, the access log
names it, and a created stream's ``Location`` uses that scheme.

A fast-path request never passes through that middleware, so ``Forwarded.apply`` runs the
middleware itself on the request's scope, before the request policy sees it: a copy of the
very middleware uvicorn built (its trusted hosts), whose inner app is a coroutine that returns
at once, driven one step. The result is uvicorn's by construction, not a second reading of the
headers (tests/server/test_forwarded.py compares the two paths behind a trusted and an
untrusted proxy). Other forwarding headers (``Forwarded``, ``X-Forwarded-Host``/``-Port``) are
read by neither path.
"""

from __future__ import annotations

import copy
from typing import Any, cast

from starlette.types import Scope
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

FORWARDING = frozenset({b"x-forwarded-for", b"x-forwarded-proto"})
"""The request headers uvicorn's proxy-headers middleware reads."""


async def _rewritten(scope: Any, receive: Any, send: Any) -> None:
    """The inner app of the middleware's copy: the scope is rewritten by the time it is called."""


async def _no_receive() -> Any:
    raise AssertionError("the proxy-headers middleware does not receive")


async def _no_send(message: Any) -> None:
    raise AssertionError("the proxy-headers middleware does not send")


class Forwarded:
    """uvicorn's proxy-headers middleware, applied to a scope in place."""

    __slots__ = ("_middleware",)

    def __init__(self, middleware: ProxyHeadersMiddleware) -> None:
        twin = copy.copy(middleware)
        twin.app = _rewritten
        self._middleware = twin

    def apply(self, scope: Scope) -> None:
        """Rewrite ``scope``'s client and scheme as the middleware would before the app sees it."""
        step = self._middleware(cast(Any, scope), _no_receive, _no_send)
        try:
            step.send(None)
        except StopIteration:
            return
        step.close()
        raise RuntimeError("uvicorn's proxy-headers middleware waited while reading a request's headers")
