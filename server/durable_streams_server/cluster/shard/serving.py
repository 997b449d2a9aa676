"""What makes a server a cluster's shard server: the parts its assembly (``server.py``) plugs in.

``ShardServing.of(config)`` is ``None`` for a single server. For a shard server it holds the
shard's ``guard`` (the app's admission: ``http.ports.Admission``) from the start, and once
storage is open gives the app its internal routes over the started engine (``routes``:
``http.ports.InternalRoutes``): the internal endpoints of the subscriptions' tail reports
(``internal``), the source's side of a fork in another shard (``fork_exports``) and the fork's
side (``fork_copies``, whose unlink sender is the routes' background work).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from ...config import ServerConfig
from ...engine.engine import Engine
from ...engine.subscriptions import SubscriptionManager
from . import fork_exports
from .fork_copies import CrossShardForks
from .guard import ShardGuard, shard_guard
from .internal import InternalHandlers
from .peers import RouterPeers


class ShardRoutes:
    """A shard server's internal routes, and its forks of other shards' streams."""

    def __init__(self, guard: ShardGuard, engine: Engine, manager: SubscriptionManager) -> None:
        self.guard = guard
        self.engine = engine
        self.forks = CrossShardForks(engine, guard)
        self.internal = InternalHandlers(manager, guard)

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

    def peers(self) -> RouterPeers | None:
        """The other shards, as the subscriptions see them: none in a cluster of one shard."""
        return RouterPeers(self.guard) if self.guard.shards > 1 else None

    def routes(self, engine: Engine, manager: SubscriptionManager) -> ShardRoutes:
        return ShardRoutes(self.guard, engine, manager)
