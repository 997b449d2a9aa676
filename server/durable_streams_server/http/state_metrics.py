"""The gauges of a started app's storage, engine, writes and subscriptions, read at scrape time.

Registered with the app's registry (``metrics.ServerMetrics``) when the app starts: before
that there is nothing of them to read, and ``/metrics`` shows only the serving's own figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric

from ..engine.subscriptions import SubscriptionManager
from .consumers import consumer_lag_metrics
from .metrics import gauge
from .started import Started


@dataclass(frozen=True, slots=True, eq=False)
class StateCollector:
    """A Prometheus collector (``collect``) of one started app (registered by identity)."""

    started: Started

    def collect(self) -> Iterator[Metric]:
        started = self.started
        engine = started.engine
        yield gauge(
            "durable_streams_streams", "Streams (soft-deleted ones with live forks included)", len(engine.streams)
        )
        yield gauge(
            "durable_streams_streams_dormant",
            "Streams kept as their state only (restored so at start, or unused a while), built again on use",
            engine.live.index.dormant,
        )
        yield CounterMetricFamily(
            "durable_streams_cold_appends",
            "Plain appends to a sleeping stream, stored without building it (engine.cold_appends)",
            value=engine.live.index.cold_tails.appends,
        )
        yield gauge(
            "durable_streams_asleep_tail_bytes",
            "Sleeping streams' cached tails, kept for reads, their entries included (engine.asleep_tails)",
            engine.tails.asleep.nbytes,
        )
        yield gauge("durable_streams_buckets", "Buckets", len(engine.buckets.by_id))
        memory = engine.memory
        yield gauge("durable_streams_memory_held_bytes", "Tail caches + history cache held in the budget", memory.held)
        yield gauge("durable_streams_memory_in_flight_bytes", "Bytes reserved by reads running", memory.in_flight)
        yield gauge(
            "durable_streams_memory_limit_bytes",
            "What the caches and reads may hold now (the memory guard lowers it while other work needs memory)",
            memory.limit,
        )
        yield gauge(
            "durable_streams_memory_outside_bytes",
            "Resident bytes above the start-up size not held in the budget (the guard's last sample)",
            engine.guard.outside,
        )
        yield CounterMetricFamily(
            "durable_streams_memory_evictions", "Entries the memory budget let go", value=memory.evictions
        )
        yield CounterMetricFamily(
            "durable_streams_history_reads_ahead",
            "History reads started ahead of a catch-up's next request (engine.history.ReadAhead)",
            value=engine.read_ahead.started,
        )
        yield gauge("durable_streams_tombstones", "Deleted streams' ends kept", len(engine.tombstones))
        retention = engine.retention
        yield CounterMetricFamily(
            "durable_streams_retention_removed_messages",
            "Messages retention policies let go of since the start (reads below answer 410; maintenance deletes them)",
            value=retention.removed_messages,
        )
        yield CounterMetricFamily(
            "durable_streams_retention_removed_bytes",
            "Bytes of the messages retention policies let go of since the start",
            value=retention.removed_bytes,
        )
        yield from consumer_lag_metrics(engine.consumers)
        writes = started.streams.bodies.writes
        if writes is not None:
            yield gauge(
                "durable_streams_writes_receiving_bytes",
                "Bytes of request bodies admitted whose request has not ended (with unflushed bytes: writes in flight)",
                writes.receiving,
            )
            yield gauge(
                "durable_streams_writes_limit_bytes",
                "Bytes of writes in flight admitted at most (the memory budget's write share)",
                writes.limit,
            )
            yield gauge("durable_streams_writes_waiting", "Request bodies waiting, unread, for room", writes.waiting)
            yield CounterMetricFamily(
                "durable_streams_writes_waited", "Request bodies that waited for room", value=writes.waited
            )
            yield CounterMetricFamily(
                "durable_streams_writes_refused",
                "Request bodies refused (503 OVERLOADED) for want of room",
                value=writes.refused,
            )
        yield from _subscription_metrics(started.subscriptions.manager)
        storage = started.storage
        yield gauge(
            "durable_streams_wal_bytes",
            "Bytes of WAL records on disk (the segment being written is preallocated beyond them)",
            storage.wal_bytes,
        )
        yield gauge(
            "durable_streams_unflushed_bytes", "Encoded bytes of records not yet in Delta", storage.unflushed_bytes
        )
        yield gauge(
            "durable_streams_flush_lag_seconds",
            "Age of the oldest record not yet committed to Delta (0 when none)",
            storage.flush_lag_s,
        )
        yield gauge(
            "durable_streams_storage_degraded",
            "1 while storage cannot make progress (see /readyz for why)",
            storage.degraded is not None,
        )
        yield gauge(
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
    yield gauge("durable_streams_subscriptions", "Subscriptions", len(manager.all()))
    for key, documentation in _SUBSCRIPTION_COUNTERS.items():
        name = f"durable_streams_subscription_{key}"
        yield CounterMetricFamily(name, documentation, value=manager.stats[key])
