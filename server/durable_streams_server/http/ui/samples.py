"""Counters the status page charts, read from the metrics registry when the page asks.

The server keeps no timer for the chart: each ``/v1/status/overview`` answer reads the
registry once (``registry_samples``, what a ``/metrics`` scrape reads) and adds a point to
``RateHistory`` if the last one is at least ``MIN_STEP_S`` old. Rates are differences of
cumulative counters between consecutive points, so a server nobody looks at pays nothing
(no sampling at all), several open pages share one history, and a page opened late shows
the minutes others watched. Appends are the stream routes' POSTs answered 2xx
(``durable_streams_http_requests_total``); bytes are ``durable_streams_stored_bytes_total``,
the message bytes stored (counted by the flusher per commit, never per request).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

Samples = dict[str, list[tuple[dict[str, str], float]]]
"""Sample name -> (labels, value) of each of its series."""

APPEND_ROUTES = frozenset({"base_stream", "bucketed_stream"})
MIN_STEP_S = 1.0
KEEP_S = 600.0
"""Ten minutes of points: at most ``KEEP_S / MIN_STEP_S`` of them."""


def registry_samples(registry: CollectorRegistry) -> Samples:
    """Every sample the registry exports now, by sample name (``_total``, ``_count`` ... included)."""
    found: Samples = {}
    for family in registry.collect():
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s series whose labels include ``labels``."""
    return sum(
        value
        for series_labels, value in samples.get(name, [])
        if all(series_labels.get(key) == want for key, want in labels.items())
    )


def appends_answered(samples: Samples) -> float:
    """Appends acknowledged since start: POSTs on a stream route answered 2xx."""
    return sum(
        value
        for labels, value in samples.get("durable_streams_http_requests_total", [])
        if labels.get("route") in APPEND_ROUTES
        and labels.get("method") == "POST"
        and labels.get("status", "")[:1] == "2"
    )


@dataclass(frozen=True, slots=True)
class Point:
    at_s: float
    appends: float
    stored_bytes: float


class RateHistory:
    """The points of the last ``KEEP_S`` seconds, added on demand (module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.points: deque[Point] = deque()

    def note(self, appends: float, stored_bytes: float) -> None:
        now = self.clock()
        points = self.points
        if points and now - points[-1].at_s < MIN_STEP_S:
            return
        if points and (appends < points[-1].appends or stored_bytes < points[-1].stored_bytes):
            points.clear()  # counters went back (a restart of storage): rates across it mean nothing
        points.append(Point(now, appends, stored_bytes))
        while points and now - points[0].at_s > KEEP_S:
            points.popleft()

    def rates(self) -> list[dict[str, float]]:
        """Per step between consecutive points: its end time (ms), appends/s and bytes/s."""
        found = []
        previous = None
        for point in self.points:
            if previous is not None:
                seconds = point.at_s - previous.at_s
                found.append(
                    {
                        "at_ms": round(point.at_s * 1000),
                        "appends_per_s": round((point.appends - previous.appends) / seconds, 3),
                        "bytes_per_s": round((point.stored_bytes - previous.stored_bytes) / seconds, 1),
                    }
                )
            previous = point
        return found
