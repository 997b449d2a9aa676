"""Prometheus metrics of one server, scraped at ``/metrics``.

Each app owns a ``CollectorRegistry`` (never the global one), so several apps can live in
one process. Per request the request policy calls ``observe_scope`` (``request_policy.py``, on
either path): one dict lookup and two cached label children updated; everything that
describes state (WAL size, flush lag, streams, live readers) is read only when scraped, so
serving pays nothing for it (a started app's storage and engine: ``state_metrics``). Storage reports
its Delta commits and compaction passes through the ``StorageObserver`` methods.

``route`` labels name a route template, never a raw path: handlers store theirs under
``ROUTE_KEY`` in the ASGI scope; requests answered before routing (auth, limits, unknown
paths) are ``unrouted``; long-poll waits and SSE streams are ``long_poll`` and ``sse``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from starlette.responses import Response
from starlette.types import Scope

from .limits import LIVE_MODE_KEY, LiveReaders

ROUTE_KEY = "durable_streams.route"
"""ASGI scope key: the route template label of a request, set by its handler."""
UNROUTED = "unrouted"
STREAM_ROUTE = "base_stream"
"""A stream of the base surface itself (not a sub-resource)."""
_LIVE_ROUTES = {"long-poll": "long_poll", "sse": "sse"}
_METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "PATCH", "DELETE", "OPTIONS"})
_STORAGE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class ServerMetrics:
    """The registry and instruments of one app; also its ``StorageObserver``."""

    def __init__(self, live_readers: LiveReaders) -> None:
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
        registry.register(_ServingCollector(self, live_readers))
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


class _ServingCollector:
    """Gauges of the serving itself, computed at scrape time (those of a started app's storage
    and engine: ``state_metrics``, registered when it starts)."""

    def __init__(self, metrics: ServerMetrics, live_readers: LiveReaders) -> None:
        self.metrics = metrics
        self.live_readers = live_readers

    def collect(self) -> Iterator[Metric]:
        yield gauge("durable_streams_http_requests_in_flight", "Requests being served", self.metrics.in_flight)
        live = GaugeMetricFamily(
            "durable_streams_live_readers", "Long-poll waits and SSE streams being served", labels=["mode"]
        )
        live.add_metric(["long_poll"], self.live_readers.long_poll)
        live.add_metric(["sse"], self.live_readers.sse)
        yield live
        yield gauge(
            "durable_streams_arrow_allocated_bytes",
            "Bytes allocated from Arrow's memory pool (message buffers, decoded Parquet, Delta writes)",
            pa.total_allocated_bytes(),
        )


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
