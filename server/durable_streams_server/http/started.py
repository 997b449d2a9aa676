"""What a started app serves with: its storage and engine, and every handler over them, built at once.

An app (``app.DurableStreamsApp``) exists before its storage is opened: opening recovers the
state (Delta read, the WAL replayed), which uvicorn's lifespan does, or the first request of an
app mounted in another. So the app cannot be given its handlers when it is built; it is given
a ``Starter`` (``server.build_app``: ``open_server``, then ``assemble``) and holds the one
``Started`` that returns, or nothing yet. ``assemble`` is the one place that builds the
handlers, each with what it needs passed in; nothing is filled in afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..engine.engine import Engine
from ..engine.memory_writes import WriteAdmission
from ..engine.subscriptions import SubscriptionManager
from ..storage.committer import Storage
from ..storage.observer import StorageObserver
from .extensions import ExtensionHandlers
from .limits import HttpLimits, LiveReaders
from .ports import NO_INTERNAL_ROUTES, InternalRoutes
from .read_plans import ReadPlanHandlers
from .streams import StreamHandlers
from .subscriptions import SubscriptionHandlers
from .time_lookup import TimeLookupHandlers


@dataclass(frozen=True, slots=True)
class Started:
    """Storage, engine and handlers of a started app (the routes' ``route(started)``)."""

    storage: Storage
    engine: Engine
    streams: StreamHandlers
    extensions: ExtensionHandlers
    subscriptions: SubscriptionHandlers
    internal: InternalRoutes
    """The routes only a cluster uses, and a shard server's forks of other shards' streams
    (``ports``; none on a single server)."""
    read_plans: ReadPlanHandlers
    time_lookups: TimeLookupHandlers

    async def start(self) -> None:
        """The background work: subscriptions' wakes, storage's WAL writer and flusher, the
        engine's memory guard and idle sweep, a shard server's internal work (its fork copies)."""
        self.subscriptions.manager.start()
        await self.storage.start()
        self.engine.guard.start()
        self.engine.idle.start()
        self.internal.start()

    async def close(self) -> None:
        """Stop it all, storage last (its final flush)."""
        await self.engine.guard.close()
        await self.engine.idle.close()
        await self.engine.read_ahead.close()
        await self.subscriptions.manager.close()
        await self.internal.close()
        await self.storage.close()


Starter = Callable[[StorageObserver], Started]
"""Opens storage (reporting to the observer), recovers its state, and assembles the handlers
over it (``assemble``); the app calls it once, when it starts."""


def assemble(
    opened: tuple[Storage, Engine, SubscriptionManager],
    limits: HttpLimits,
    live_readers: LiveReaders,
    internal: InternalRoutes = NO_INTERNAL_ROUTES,
) -> Started:
    """The handlers over ``opened`` (``server.open_server``: storage, engine and the subscription
    manager, recovered, not yet started), with ``internal`` (over the same: a cluster's shard
    server's). With ``limits.write_bytes``, request bodies wait for room (then 503) while the
    writes in flight fill that share of the memory budget."""
    storage, engine, manager = opened
    writes = (
        WriteAdmission(
            limits.write_bytes, lambda: storage.unflushed_bytes, stalled=lambda: storage.degraded is not None
        )
        if limits.write_bytes
        else None
    )
    streams = StreamHandlers(engine, limits, live_readers, internal.forks, writes)
    return Started(
        storage=storage,
        engine=engine,
        streams=streams,
        extensions=ExtensionHandlers(streams),
        subscriptions=SubscriptionHandlers(manager),
        internal=internal,
        read_plans=ReadPlanHandlers(engine, storage.plans.access, storage.config.read_plan_ttl_s),
        time_lookups=TimeLookupHandlers(engine),
    )
