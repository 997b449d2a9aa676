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
from .fork_copies import CrossShardForks
from .internal import InternalHandlers
from .limits import HttpLimits, LiveReaders
from .read_plans import ReadPlanHandlers
from .shard_guard import ShardGuard
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
    internal: InternalHandlers
    read_plans: ReadPlanHandlers
    time_lookups: TimeLookupHandlers
    cross_shard: CrossShardForks | None
    """A cluster shard server's forks of other shards' streams (``fork_copies``); ``None``: no cluster."""

    async def start(self) -> None:
        """The background work: subscriptions' wakes, storage's WAL writer and flusher, the
        engine's memory guard and idle sweep, a shard server's fork copies."""
        self.subscriptions.manager.start()
        await self.storage.start()
        self.engine.guard.start()
        self.engine.idle.start()
        if self.cross_shard is not None:
            self.cross_shard.start()

    async def close(self) -> None:
        """Stop it all, storage last (its final flush)."""
        await self.engine.guard.close()
        await self.engine.idle.close()
        await self.subscriptions.manager.close()
        if self.cross_shard is not None:
            await self.cross_shard.close()
        await self.storage.close()


Starter = Callable[[StorageObserver], Started]
"""Opens storage (reporting to the observer), recovers its state, and assembles the handlers
over it (``assemble``); the app calls it once, when it starts."""


def assemble(
    opened: tuple[Storage, Engine, SubscriptionManager],
    limits: HttpLimits,
    live_readers: LiveReaders,
    shard_guard: ShardGuard | None,
) -> Started:
    """The handlers over ``opened`` (``server.open_server``: storage, engine and the subscription
    manager, recovered, not yet started). With ``limits.write_bytes``, request bodies wait for
    room (then 503) while the writes in flight fill that share of the memory budget."""
    storage, engine, manager = opened
    cross_shard = CrossShardForks(engine, shard_guard) if shard_guard is not None else None
    writes = (
        WriteAdmission(
            limits.write_bytes, lambda: storage.unflushed_bytes, stalled=lambda: storage.degraded is not None
        )
        if limits.write_bytes
        else None
    )
    streams = StreamHandlers(engine, limits, live_readers, cross_shard, writes)
    return Started(
        storage=storage,
        engine=engine,
        streams=streams,
        extensions=ExtensionHandlers(streams),
        subscriptions=SubscriptionHandlers(manager),
        internal=InternalHandlers(manager, shard_guard, live_readers),
        read_plans=ReadPlanHandlers(engine, storage.plans.access, storage.config.read_plan_ttl_s),
        time_lookups=TimeLookupHandlers(engine),
        cross_shard=cross_shard,
    )
