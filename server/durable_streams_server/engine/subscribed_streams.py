"""The streams the subscriptions see, a port with a single server's default: this engine's own.

The subscription manager asks its ``LocalStreams`` for a linked stream's tail, a root's
streams, and whether a path is another server's; it tells it of its own streams' changes and of
changes of what its subscriptions want, and appends wake events through it. A single server's
(this class) knows its engine's streams only, and asks nothing of anyone.

On a cluster's shard server the base surface's subscriptions also see the other shards' streams:
the server's assembly gives the manager a ``LocalStreams`` of the cluster's
(``cluster.shard.shard_reports.ShardReports``), which knows them by their tail reports, asks the
other shards for their tails, and appends wake events to their streams.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from ..protocol.subscriptions import literal_prefix
from .reserved_records import stream_root
from .subscription_state import Subscription
from .types import AppendRequest

if TYPE_CHECKING:
    from .engine import Engine
    from .types import VisibleStream


class Members(Protocol):
    """What the streams' view needs from the subscription manager."""

    engine: Engine
    by_root: dict[str, dict[str, Subscription]]

    def seen(self, root: str, path: str, tail: int, created_ms: int | None) -> None: ...

    @staticmethod
    def unlink(sub: Subscription, path: str) -> None: ...


class LocalStreams:
    """This engine's streams, the only ones a single server's subscriptions see (module docstring)."""

    def __init__(self, manager: Members) -> None:
        self.manager = manager

    def start(self) -> None:
        """The manager has started: its subscriptions are loaded, its hooks attached."""

    async def close(self) -> None:
        """The manager is closing."""

    def is_remote(self, root: str, path: str) -> bool:
        """Whether ``path`` of ``root`` is another server's stream."""
        return False

    def tail(self, root: str, path: str) -> int | None:
        """A live stream's visible tail; ``None`` if it does not exist (or is not known yet). A
        cold stream stays cold (``stream_facts``)."""
        return self.manager.engine.live_tail(root + path)

    def streams_of(self, root: str, pattern: str, wanted: Callable[[str], bool]) -> list[tuple[str, int, int]]:
        """Every live stream of ``root`` that ``pattern`` may match and ``wanted`` accepts: (path,
        visible tail, created_ms). Only the names under the pattern's literal prefix are walked
        in Python, and no cold stream is built."""
        return self.manager.engine.live_streams_under(
            root, [literal_prefix(pattern)], lambda path: stream_root(root + path) == root and wanted(path)
        )

    def noted(self, stream: VisibleStream, removed: bool) -> None:
        """A local stream's new durable tail, or its removal (after the manager's own hooks)."""

    def update_interest(self) -> None:
        """The subscriptions' patterns or explicit streams may have changed."""

    async def ask_peers(self, root: str, patterns: tuple[str, ...], paths: tuple[str, ...]) -> None:
        """Learn the other servers' streams ``patterns`` and ``paths`` name, at their tails now,
        before linking them."""

    async def catch_up(self, sub: Subscription) -> bool:
        """Ask the other servers for the tails of ``sub``'s streams now; whether it learned them."""
        return False

    async def refresh(self, sub: Subscription, acks: Iterable[tuple[str, int]], tails: dict[str, int]) -> bool:
        """Ask the other servers of streams acked past their known tails for their tails now;
        whether it asked."""
        return False

    async def append_events(self, sub: Subscription, body: bytes) -> None:
        """Append wake events to ``sub``'s wake stream."""
        wake_stream = sub.config.wake_stream
        assert wake_stream is not None
        await self.manager.engine.append(sub.root + wake_stream, AppendRequest(body, None, None, None, False))
