"""The status page's two routes: ``/ui`` (its files, ``page``) and ``/v1/status/<view>`` (JSON).

Views, each documented in the README ("Operations: the status page") so scripts can use them:

- ``overview``: streams and buckets the token may read, and for a token that covers the
  whole server (no bucket or prefix limits) the server's own figures: live readers, storage
  (WAL bytes, unflushed bytes, flush lag, degraded reason: the object store's health),
  Delta commits and compaction passes (counts, failures, mean duration), what retention
  policies removed since the start (messages, bytes), the memory budget,
  and appends/s and bytes/s over the last minutes (``samples.RateHistory``);
- ``streams`` and ``stream``: ``streams_view``;
- ``subscriptions``: those of the roots the token may read (the base surface, or a bucket),
  each with its pending streams and its current wake (holder, lease expiry, delivery
  attempts, the next retry of a failing webhook), and the server's delivery counters.

Authorization is the rest of the server's: ``/v1/status/...`` needs a valid token when tokens
are configured (``policy``), and every answer holds only what that token may read; ``/ui``
is public (it holds no data; the page asks for a token and keeps it in session storage).
Everything is read on demand from objects the server keeps anyway; nothing here touches the
request hot path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...protocol.errors import MethodNotAllowed, NotFound
from ...protocol.tokens import AuthConfig, TokenGrant
from ..limits import PRINCIPAL_KEY, LiveReaders
from ..metrics import ROUTE_KEY, ServerMetrics
from ..policy import Need
from ..started import Started
from . import page, streams_view
from .samples import RateHistory, appends_answered, registry_samples, total

if TYPE_CHECKING:
    from ...engine.subscription_state import Subscription
    from ...engine.subscriptions import SubscriptionManager

Guarded = Callable[[Request, Callable[[Started], Awaitable[Response]]], Awaitable[Response]]
"""The app's wrapper of a route: start on first use (the route gets what the app started with),
preflights, protocol errors as JSON."""

_OPEN = TokenGrant("(no tokens configured)", "admin")
_NO_STORE = {"Cache-Control": "no-store"}


class StatusPage:
    def __init__(
        self, metrics: ServerMetrics, live_readers: LiveReaders, auth: AuthConfig | None, guarded: Guarded
    ) -> None:
        self.metrics = metrics
        self.live_readers = live_readers
        self.guarded = guarded
        self.grants = {grant.name: grant for grant in auth.grants} if auth is not None else None
        self.rates = RateHistory()

    async def page(self, request: Request) -> Response:
        """``/ui`` and ``/ui/<file>``."""
        request.scope[ROUTE_KEY] = "ui"

        async def route(_: Started) -> Response:
            if request.method not in ("GET", "HEAD"):
                raise_method(request)
            if "asset" not in request.path_params:  # ``/`` or ``/ui``: the page's relative links need ``/ui/``
                return Response(status_code=308, headers={"Location": "ui/", "Cache-Control": "no-store"})
            return page.asset(request.path_params["asset"])

        return await self.guarded(request, route)

    async def status(self, request: Request) -> Response:
        """``/v1/status/<view>``."""
        request.scope[ROUTE_KEY] = "status"

        async def route(started: Started) -> Response:
            if request.method not in ("GET", "HEAD"):
                raise_method(request)
            grant = self._grant(request)
            view = request.path_params["view"]
            engine = started.engine
            params = dict(request.query_params)
            body: dict[str, Any]
            if view == "overview":
                body = await self.overview(started, grant)
            elif view == "streams":
                body = await streams_view.list_streams(engine, grant, params)
            elif view == "stream":
                body = await streams_view.recent_messages(engine, grant, params.get("name", ""))
            elif view == "subscriptions":
                body = self.subscriptions(started.subscriptions.manager, grant)
            else:
                raise NotFound(f"no status view {view!r} (overview, streams, stream, subscriptions)", code="NOT_FOUND")
            return JSONResponse(body, headers=_NO_STORE)

        return await self.guarded(request, route)

    def _grant(self, request: Request) -> TokenGrant:
        if self.grants is None:
            return _OPEN
        return self.grants[request.scope[PRINCIPAL_KEY]]  # (auth let the request in: a known token)

    # -- overview ---------------------------------------------------------------------------

    async def overview(self, started: Started, grant: TokenGrant) -> dict[str, Any]:
        engine, storage = started.engine, started.storage
        streams = await streams_view.count_readable(engine, grant)
        buckets = [bucket for bucket in engine.buckets.by_id if Need("read", "bucket", bucket).covered_by(grant)]
        body: dict[str, Any] = {"token": grant.name, "whole_server": grant.unlimited, "streams": streams}
        body["buckets"] = sorted(buckets)
        if not grant.unlimited:
            return body  # the server's own figures are for a token that covers all of it
        samples = registry_samples(self.metrics.registry)
        self.rates.note(appends_answered(samples), total(samples, "durable_streams_stored_bytes_total"))
        memory = engine.memory
        body |= {
            "live_readers": {"long_poll": self.live_readers.long_poll, "sse": self.live_readers.sse},
            "storage": {
                "durability": storage.config.durability,
                "wal_bytes": storage.wal_bytes,
                "unflushed_bytes": storage.unflushed_bytes,
                "flush_lag_s": round(storage.flush_lag_s, 3),
                "stored_bytes": storage.stored_bytes,
                "degraded": storage.degraded,
                "last_lsn": storage.next_lsn - 1,
            },
            "delta_commits": _passes(samples, "durable_streams_delta_commit"),
            "compaction": _passes(samples, "durable_streams_compaction"),
            "memory": {
                "held_bytes": memory.held,
                "in_flight_bytes": memory.in_flight,
                "limit_bytes": memory.limit,
                "outside_bytes": engine.guard.outside,
                "evictions": memory.evictions,
            },
            "retention": {
                "removed_messages": engine.retention.removed_messages,
                "removed_bytes": engine.retention.removed_bytes,
            },
            "appends": appends_answered(samples),
            "rates": self.rates.rates(),
        }
        return body

    # -- subscriptions ------------------------------------------------------------------------

    def subscriptions(self, manager: SubscriptionManager, grant: TokenGrant) -> dict[str, Any]:
        rows = [_subscription_row(manager, sub) for sub in manager.all() if _root_readable(grant, sub.root)]
        rows.sort(key=lambda row: (row["root"], row["id"]))
        body: dict[str, Any] = {"subscriptions": rows}
        if grant.unlimited:
            body["counters"] = dict(manager.stats)
        return body


def raise_method(request: Request) -> None:
    raise MethodNotAllowed(f"{request.url.path} is read-only: GET and HEAD")


def _passes(samples: dict[str, list[tuple[dict[str, str], float]]], prefix: str) -> dict[str, float | None]:
    count = total(samples, prefix + "_duration_seconds_count")
    seconds = total(samples, prefix + "_duration_seconds_sum")
    return {
        "count": count,
        "failures": total(samples, prefix + "_failures_total"),
        "mean_s": round(seconds / count, 4) if count else None,
    }


def _root_readable(grant: TokenGrant, root: str) -> bool:
    """A subscription's root as the control routes judge it: the base surface, or a bucket."""
    if root.startswith("v1/"):
        return Need("read", "stream", root).covered_by(grant)
    return Need("read", "bucket", root.rstrip("/")).covered_by(grant)


def _subscription_row(manager: SubscriptionManager, sub: Subscription) -> dict[str, Any]:
    wake = sub.wake
    pending = sub.pending(manager.tails(sub))  # (the tails its wakes are made of: another shard's by its reports)
    return {
        "root": sub.root,
        "id": sub.subscription_id,
        "type": sub.config.type,
        "pattern": sub.config.pattern,
        "webhook_url": sub.config.webhook_url,
        "streams": len(sub.links),
        "pending_streams": len(pending),
        "generation": sub.generation,
        "failing": wake is not None and wake.next_attempt_ms is not None,
        "wake": None
        if wake is None
        else {
            "wake_id": wake.wake_id,
            "holder": wake.holder,
            "lease_expires_ms": wake.lease_expires_ms,
            "attempts": wake.attempts,
            "next_attempt_ms": wake.next_attempt_ms,
            "delivered": wake.delivered,
        },
    }
