"""What makes a server a cluster's shard server: the parts its assembly (``server.py``) plugs in.

``ShardServing.of(config)`` is ``None`` for a single server. For a shard server it holds the
shard's ``guard`` (the app's admission: ``http.ports.Admission``) from the start; once storage
is open, ``plug`` gives the subscription manager its view of the other shards' streams
(``shard_reports``, over ``peers`` in a cluster of more than one shard) and the app its internal
routes over the started engine (``ShardRoutes``: ``http.ports.InternalRoutes``): the internal
endpoints of the subscriptions' tail reports (``internal``), the source's side of a fork in
another shard (``fork_exports``) and the fork's side (``fork_copies``, whose unlink sender is
the routes' background work).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from ...config import ServerConfig
from ...engine.engine import Engine
from ...engine.subscriptions import SubscriptionManager
from ...http.limits import LiveReaders
from . import fork_exports
from .fork_copies import CrossShardForks
from .guard import ShardGuard, shard_guard
from .internal import InternalHandlers
from .peers import RouterPeers
from .shard_reports import ShardReports


class ShardRoutes:
    """A shard server's internal routes, and its forks of other shards' streams."""

    def __init__(self, guard: ShardGuard, engine: Engine, reports: ShardReports, live_readers: LiveReaders) -> None:
        self.guard = guard
        self.engine = engine
        self.forks = CrossShardForks(engine, guard)
        self.internal = InternalHandlers(engine, reports, guard, live_readers)

    async def answer(self, route: str, request: Request) -> Response:
        if route == "cluster":
            return await fork_exports.answer(self.engine, self.guard, request)
        return await self.internal.handle(request, request.path_params["rest"])

    def start(self) -> None:
        self.forks.start()

    async def close(self) -> None:
        await self.forks.close()


@dataclass(frozen=True)
class ShardServing:
    guard: ShardGuard

    @classmethod
    def of(cls, config: ServerConfig) -> ShardServing | None:
        """A shard server's parts, or ``None`` when ``config`` is no shard server's."""
        guard = shard_guard(config)
        return None if guard is None else cls(guard)

    def plug(self, engine: Engine, manager: SubscriptionManager, live_readers: LiveReaders) -> ShardRoutes:
        """Give ``manager`` (recovered, not started) the other shards' streams, and the routes
        over ``engine`` (whose waits end with ``live_readers``' when the server stops)."""
        peers = RouterPeers(self.guard) if self.guard.shards > 1 else None
        manager.streams = reports = ShardReports(manager, peers)
        return ShardRoutes(self.guard, engine, reports, live_readers)
