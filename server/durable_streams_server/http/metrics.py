"""Prometheus metrics of one server, scraped at ``/metrics``.

Each app owns a ``CollectorRegistry`` (never the global one), so several apps can live in
one process. Per request the request policy calls ``observe_scope`` (``request_policy.py``, on
either path): one dict lookup and two cached label children updated; everything that
describes state (WAL size, flush lag, streams, live readers) is read only when scraped, so
serving pays nothing for it. Storage reports
its Delta commits and compaction passes through the ``StorageObserver`` methods.

``route`` labels name a route template, never a raw path: handlers store theirs under
``ROUTE_KEY`` in the ASGI scope; requests answered before routing (auth, limits, unknown
paths) are ``unrouted``; long-poll waits and SSE streams are ``long_poll`` and ``sse``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from starlette.responses import Response
from starlette.types import Scope

from .consumers import consumer_lag_metrics
from .limits import LIVE_MODE_KEY, LiveReaders

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from ..engine.subscriptions import SubscriptionManager
    from ..storage.committer import Storage
    from .streams import StreamHandlers
    from .subscriptions import SubscriptionHandlers

ROUTE_KEY = "durable_streams.route"
"""ASGI scope key: the route template label of a request, set by its handler."""
UNROUTED = "unrouted"
STREAM_ROUTE = "base_stream"
"""A stream of the base surface itself (not a sub-resource)."""
_LIVE_ROUTES = {"long-poll": "long_poll", "sse": "sse"}
_METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"})
_STORAGE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class MetricsSource(Protocol):
    """What the state collector reads at scrape time (the app; its parts appear on start)."""

    storage: Storage | None
    engine: Engine | None
    live_readers: LiveReaders
    subscriptions: SubscriptionHandlers | None
    handlers: StreamHandlers | None


class ServerMetrics:
    """The registry and instruments of one app; also its ``StorageObserver``."""

    def __init__(self, source: MetricsSource) -> None:
        self.registry = registry = CollectorRegistry()
        self.in_flight = 0
        self._requests = Counter(
            "durable_streams_http_requests",
            "HTTP requests answered, by route template, method and status",
            ["route", "method", "status"],
            registry=registry,
        )
        self._latency = Histogram(
            "durable_streams_http_request_duration_seconds",
            "Time from receiving a request to the end of its response (live reads: the whole wait)",
            ["route"],
            registry=registry,
        )
        self._commits = Histogram(
            "durable_streams_delta_commit_duration_seconds",
            "Duration of successful Delta commits of the flusher",
            registry=registry,
            buckets=_STORAGE_BUCKETS,
        )
        self._commit_failures = Counter(
            "durable_streams_delta_commit_failures", "Delta commit attempts that raised", registry=registry
        )
        self._compactions = Histogram(
            "durable_streams_compaction_duration_seconds",
            "Duration of successful compaction passes",
            registry=registry,
            buckets=_STORAGE_BUCKETS,
        )
        self._compaction_failures = Counter(
            "durable_streams_compaction_failures", "Compaction passes that raised", registry=registry
        )
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        registry.register(_StateCollector(self, source))
        ProcessCollector(registry=registry)

    def observe_scope(self, scope: Scope, status: int, seconds: float) -> None:
        """One answered request; its route label from the scope (see the module docstring)."""
        live = scope.get(LIVE_MODE_KEY)
        route = _LIVE_ROUTES[live] if live is not None else scope.get(ROUTE_KEY, UNROUTED)
        self.observe_request(route, scope["method"], status, seconds)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        if method not in _METHODS:
            method = "OTHER"  # clients choose methods: keep the label set bounded
        key = (route, method, status)
        children = self._children.get(key)
        if children is None:
            children = (self._requests.labels(route, method, str(status)), self._latency.labels(route))
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    # -- StorageObserver ------------------------------------------------------------------

    def delta_commit(self, seconds: float, ok: bool) -> None:
        if ok:
            self._commits.observe(seconds)
        else:
            self._commit_failures.inc()

    def compaction(self, seconds: float, ok: bool) -> None:
        if ok:
            self._compactions.observe(seconds)
        else:
            self._compaction_failures.inc()

    def response(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class _StateCollector:
    """Gauges computed at scrape time from the live objects."""

    def __init__(self, metrics: ServerMetrics, source: MetricsSource) -> None:
        self.metrics = metrics
        self.source = source

    def collect(self) -> Iterator[Metric]:
        source = self.source
        yield _gauge("durable_streams_http_requests_in_flight", "Requests being served", self.metrics.in_flight)
        live = GaugeMetricFamily(
            "durable_streams_live_readers", "Long-poll waits and SSE streams being served", labels=["mode"]
        )
        live.add_metric(["long_poll"], source.live_readers.long_poll)
        live.add_metric(["sse"], source.live_readers.sse)
        yield live
        engine = source.engine
        if engine is not None:
            yield _gauge(
                "durable_streams_streams", "Streams (soft-deleted ones with live forks included)", len(engine.streams)
            )
            yield _gauge(
                "durable_streams_streams_dormant",
                "Streams kept as their state only (restored so at start, or unused a while), built again on use",
                engine.live.index.dormant,
            )
            yield _gauge("durable_streams_buckets", "Buckets", len(engine.buckets.by_id))
            memory = engine.memory
            yield _gauge(
                "durable_streams_memory_held_bytes", "Tail caches + history cache held in the budget", memory.held
            )
            yield _gauge("durable_streams_memory_in_flight_bytes", "Bytes reserved by reads running", memory.in_flight)
            yield _gauge(
                "durable_streams_memory_limit_bytes",
                "What the caches and reads may hold now (the memory guard lowers it while other work needs memory)",
                memory.limit,
            )
            yield _gauge(
                "durable_streams_memory_outside_bytes",
                "Resident bytes above the start-up size not held in the budget (the guard's last sample)",
                engine.guard.outside,
            )
            yield CounterMetricFamily(
                "durable_streams_memory_evictions", "Entries the memory budget let go", value=memory.evictions
            )
            yield _gauge("durable_streams_tombstones", "Deleted streams' ends kept", len(engine.tombstones))
            yield from consumer_lag_metrics(engine.consumers)
        yield _gauge(
            "durable_streams_arrow_allocated_bytes",
            "Bytes allocated from Arrow's memory pool (message buffers, decoded Parquet, Delta writes)",
            pa.total_allocated_bytes(),
        )
        writes = source.handlers.writes if source.handlers is not None else None
        if writes is not None:
            yield _gauge(
                "durable_streams_writes_receiving_bytes",
                "Bytes of request bodies admitted whose request has not ended (with unflushed bytes: writes in flight)",
                writes.receiving,
            )
            yield _gauge(
                "durable_streams_writes_limit_bytes",
                "Bytes of writes in flight admitted at most (the memory budget's write share)",
                writes.limit,
            )
            yield _gauge("durable_streams_writes_waiting", "Request bodies waiting, unread, for room", writes.waiting)
            yield CounterMetricFamily(
                "durable_streams_writes_waited", "Request bodies that waited for room", value=writes.waited
            )
            yield CounterMetricFamily(
                "durable_streams_writes_refused",
                "Request bodies refused (503 OVERLOADED) for want of room",
                value=writes.refused,
            )
        if source.subscriptions is not None:
            yield from _subscription_metrics(source.subscriptions.manager)
        storage = source.storage
        if storage is not None:
            yield _gauge(
                "durable_streams_wal_bytes",
                "Bytes of WAL records on disk (the segment being written is preallocated beyond them)",
                storage.wal_bytes,
            )
            yield _gauge(
                "durable_streams_unflushed_bytes", "Encoded bytes of records not yet in Delta", storage.unflushed_bytes
            )
            yield _gauge(
                "durable_streams_flush_lag_seconds",
                "Age of the oldest record not yet committed to Delta (0 when none)",
                storage.flush_lag_s,
            )
            yield _gauge(
                "durable_streams_storage_degraded",
                "1 while storage cannot make progress (see /readyz for why)",
                storage.degraded is not None,
            )
            yield _gauge(
                "durable_streams_last_lsn",
                "Sequence number of the newest stored change (every create, append, delete ... is one)",
                storage.next_lsn - 1,
            )
            yield CounterMetricFamily(
                "durable_streams_stored_bytes",
                "Message bytes stored since start (appends, creates' bodies, snapshots); its rate: bytes written",
                value=storage.stored_bytes,
            )
            yield CounterMetricFamily(
                "durable_streams_history_read_bytes",
                "Bytes read from Delta data files by history reads (footers included)",
                value=storage.history_read_bytes,
            )


_SUBSCRIPTION_COUNTERS = {
    "deliveries": "Webhook deliveries the receiver accepted (2xx)",
    "delivery_failures": "Webhook attempts that failed (and wake events that could not be written)",
    "retries": "Webhook delivery retries",
    "lease_expiries": "Wake leases that expired without done or release",
    "wake_events": "Pull-wake events written to wake streams",
}


def _subscription_metrics(manager: SubscriptionManager) -> Iterator[Metric]:
    yield _gauge("durable_streams_subscriptions", "Subscriptions", len(manager.all()))
    for key, documentation in _SUBSCRIPTION_COUNTERS.items():
        name = f"durable_streams_subscription_{key}"
        yield CounterMetricFamily(name, documentation, value=manager.stats[key])


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
