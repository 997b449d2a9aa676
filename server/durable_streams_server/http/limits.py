"""Per-server HTTP limits, chosen by the operator (see ``config.ServerConfig``), and the
pieces that enforce the ones uvicorn does not.

Each limit answers with the project's JSON error body and before anything is stored:

- request line + headers over ``max_header_bytes``: 431 (``RequestLimits``; the connection
  protocols refuse heads still incomplete beyond it, see ``fastpath/guards.py``);
- a request body not complete within ``request_timeout_s``: 408 (``BodyDeadline``);
- more concurrent long-poll waits + SSE streams than ``max_live_readers``: 503 with
  ``Retry-After`` (``LiveReaders``) -- they hold a connection each for a long time;
- more requests per second than ``rate_limit_rps`` from one token (or, without auth, one
  client address): 429 with ``Retry-After`` (``RateLimiter``);
- request bodies while writes in flight fill ``write_bytes`` (the memory budget's share): they
  wait, unread, then 503 with ``Retry-After`` (``engine.memory_writes.WriteAdmission``).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from starlette.types import Scope

from ..protocol.errors import HeadersTooLarge, ProtocolError, RequestTimeout, ServiceUnavailable, TooManyRequests

LiveMode = Literal["long-poll", "sse"]

LIVE_MODE_KEY = "durable_streams.live"
"""ASGI scope key: the live mode of a request admitted by ``LiveReaders`` (metrics label it too)."""
PRINCIPAL_KEY = "durable_streams.principal"
"""ASGI scope key set by the auth middleware: the authenticated token's name."""
UNLIMITED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Probes and scrapes touch no stream; rate-limiting them would only make a busy client
look like an unhealthy server."""
LIVE_RETRY_AFTER_S = 2
WRITE_BYTES_KEY = "durable_streams.write_bytes"
"""ASGI scope key: bytes of the request's body admitted by ``engine.memory_writes.WriteAdmission``,
released when the request ends (``RequestPolicy.end``)."""
WRITES_KEY = "durable_streams.writes"
"""ASGI scope key: the ``WriteAdmission`` that admitted them (a started app's: the request policy,
built before the app starts, releases them to it)."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The HTTP layer's share of ``ServerConfig`` (0 means "no limit" where the config says so)."""

    max_body_bytes: int
    max_read_bytes: int
    long_poll_timeout_s: float
    sse_reconnect_s: float
    request_timeout_s: float
    max_header_bytes: int
    max_live_readers: int
    rate_limit_rps: float
    rate_limit_burst: int
    write_bytes: int = 0
    """Bytes of writes in flight (bodies received + records not yet in Delta) the memory budget
    admits (``engine.memory_writes``); 0: no limit."""


class BodyDeadline:
    """``with BodyDeadline(s): <read the body>`` raises ``RequestTimeout`` when the body
    is not complete in time. Like ``asyncio.timeout`` (3.11+) it cancels the reading task
    from a timer, which costs one timer handle per body instead of ``wait_for``'s task."""

    __slots__ = ("_handle", "_seconds", "_task", "expired")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self.expired = False

    def __enter__(self) -> BodyDeadline:
        task = asyncio.current_task()
        if task is None:  # (a request's first step started outside a task: see fastpath/eager.py)
            raise RuntimeError("BodyDeadline cancels the reading task, and there is none")
        self._task = task
        self._handle = asyncio.get_running_loop().call_later(self._seconds, self._expire)
        return self

    def _expire(self) -> None:
        self.expired = True
        self._task.cancel()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._handle.cancel()
        if self.expired and kind is asyncio.CancelledError:
            uncancel = getattr(self._task, "uncancel", None)  # 3.11+: the cancel was ours
            if uncancel is not None:
                uncancel()
            raise RequestTimeout(
                f"the request body did not arrive within {self._seconds:g}s", headers={"Connection": "close"}
            ) from None


class LiveReaders:
    """Counts long-poll waits and SSE streams, and refuses new ones over the cap (0: no cap).

    A handler ``admit``s just before it starts to hold the connection; the request policy
    releases once the whole response is done (``RequestPolicy.end``) -- an SSE body outlives
    its handler, and the policy's end runs however the response ends.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.long_poll = 0
        self.sse = 0
        self._ended: asyncio.Future[None] | None = None

    @property
    def ended(self) -> bool:
        """The server is stopping (``end``)."""
        return self._ended is not None and self._ended.done()

    def ending(self) -> asyncio.Future[None]:
        """Done once the server stops: a long-poll waiting on it is answered at once, as at its
        timeout, and an SSE stream ends after its next control event (``reads.wait_for_change``)."""
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
        return self._ended

    def end(self) -> None:
        """The server begins to stop (its connections' ``shutdown``: ``fastpath.guards``): answer
        every live reader now, each with a complete response the client resumes from, rather than
        hold the stop for uvicorn's graceful timeout and then cut their connections."""
        ending = self.ending()
        if not ending.done():
            ending.set_result(None)

    def admit(self, scope: Scope, mode: LiveMode) -> None:
        if LIVE_MODE_KEY in scope:
            return
        if self.cap and self.long_poll + self.sse >= self.cap:
            raise ServiceUnavailable(
                f"this server already serves {self.cap} live readers (long-poll and SSE); retry shortly",
                code="TOO_MANY_LIVE_READERS",
                headers={"Retry-After": str(LIVE_RETRY_AFTER_S)},
            )
        scope[LIVE_MODE_KEY] = mode
        if mode == "sse":
            self.sse += 1
        else:
            self.long_poll += 1

    def release(self, scope: Scope) -> None:
        mode = scope.get(LIVE_MODE_KEY)
        if mode == "sse":
            self.sse -= 1
        elif mode == "long-poll":
            self.long_poll -= 1


class RateLimiter:
    """A token bucket per client: ``burst`` requests at once, refilled at ``rate`` per second.

    Buckets that have refilled completely carry no information, so they are dropped now
    and then (at most once per refill period) to keep one-off clients from piling up.
    """

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = float(max(1, burst))
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._refill_s = self.burst / rate
        self._next_sweep = clock() + self._refill_s

    def retry_after(self, key: str) -> int:
        """0 when ``key`` may proceed now (and is charged); else whole seconds until it may."""
        now = self.clock()
        tokens, at = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            if now >= self._next_sweep:
                self._sweep(now)
            return 0
        self._buckets[key] = (tokens, now)
        return max(1, math.ceil((1.0 - tokens) / self.rate))

    def _sweep(self, now: float) -> None:
        self._next_sweep = now + self._refill_s
        full = [key for key, (tokens, at) in self._buckets.items() if tokens + (now - at) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]


def client_key(scope: Scope) -> str:
    """Who a request is charged to: its token when auth is on, else its client address
    (behind a proxy without forwarded headers that is the proxy: one shared budget)."""
    principal = scope.get(PRINCIPAL_KEY)
    if principal is not None:
        return f"token:{principal}"
    client = scope.get("client")
    return f"addr:{client[0]}" if client else "addr:?"


def head_bytes(scope: Scope) -> int:
    """About the size of the request line + headers as sent (not counting the method)."""
    headers = scope["headers"]
    size = len(scope.get("raw_path") or scope["path"]) + len(scope["query_string"]) + 12 + 4 * len(headers)
    return size + sum(map(len, itertools.chain.from_iterable(headers)))  # (no Python loop per header)


class RequestLimits:
    """Header size and rate limits, checked by the request policy before routing (after auth, so a
    token is known)."""

    def __init__(self, *, max_header_bytes: int, rate_limit_rps: float, rate_limit_burst: int) -> None:
        self.max_header_bytes = max_header_bytes
        self.rate_limiter = (
            RateLimiter(rate_limit_rps, rate_limit_burst or math.ceil(rate_limit_rps)) if rate_limit_rps > 0 else None
        )

    def refusal(self, scope: Scope) -> ProtocolError | None:
        if self.max_header_bytes and head_bytes(scope) > self.max_header_bytes:
            return HeadersTooLarge(
                f"the request line and headers are over {self.max_header_bytes} bytes",
                headers={"Connection": "close"},
            )
        limiter = self.rate_limiter
        if limiter is not None and scope["path"] not in UNLIMITED_PATHS:
            wait_s = limiter.retry_after(client_key(scope))
            if wait_s:
                return TooManyRequests(
                    f"over the rate limit of {limiter.rate:g} requests/s; retry in {wait_s}s",
                    headers={"Retry-After": str(wait_s)},
                )
        return None
