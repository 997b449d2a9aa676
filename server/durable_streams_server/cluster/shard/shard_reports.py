"""The streams a shard server's subscriptions see: the engine's own and, on the base surface of a
cluster's home shard, the other shards' as their tail reports describe them (the interest it
publishes, the remote streams it keeps, what their reports change in the base surface's
subscriptions). A ``engine.subscribed_streams.LocalStreams``, given to the subscription manager
by the server's assembly (``serving``).

``tail``/``streams_of`` answer for both kinds alike; ``is_remote`` tells them apart (a path
of another shard on the base surface, when the manager has peers). A remote stream not
reported yet has no tail: the manager counts its link as caught up until a report comes.

The protocol is described in ``remote_streams``. A report applies like the engine's own
hooks: a stream's new tail is ``SubscriptionManager.seen`` (linking a new matching stream
at 0 if created after the subscription, else at its tail, and waking pending work), a
removal unlinks it. A full report also unlinks every stream of the reporting shard that it
does not name, which is how a home that restarted (whose view of remote streams starts
empty, while the subscriptions' links are recovered) drops what was deleted meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ...engine.subscribed_streams import LocalStreams, Members
from ...engine.subscription_state import Subscription
from ...protocol.errors import Conflict, ServiceUnavailable
from .peers import RouterPeers
from .remote_streams import BASE_ROOT, Interest, InterestView, RemoteStreams, ReportedStream

if TYPE_CHECKING:
    from ...engine.types import VisibleStream


class ShardReports(LocalStreams):
    def __init__(self, manager: Members, peers: RouterPeers | None) -> None:
        super().__init__(manager)
        self.peers = peers
        """The other shards (``peers``); ``None`` in a cluster of one shard: every stream is local."""
        self.remote = RemoteStreams()
        self.interest = Interest()

    def start(self) -> None:
        self.update_interest()
        if self.peers is not None:
            self.peers.start(self.manager.engine)

    async def close(self) -> None:
        if self.peers is not None:
            await self.peers.close()

    def noted(self, stream: VisibleStream, removed: bool) -> None:
        if self.peers is not None:
            self.peers.noted(stream, removed)

    def is_remote(self, root: str, path: str) -> bool:
        """Whether ``path`` of ``root`` is another shard's stream (known by tail reports)."""
        peers = self.peers
        return peers is not None and root == BASE_ROOT and peers.shard_of(path) != peers.shard

    def tail(self, root: str, path: str) -> int | None:
        """A live stream's visible tail; ``None`` if it does not exist (or is not reported)."""
        if self.is_remote(root, path):
            facts = self.remote.get(path)
            return None if facts is None else facts.tail
        return super().tail(root, path)

    def streams_of(self, root: str, pattern: str, wanted: Callable[[str], bool]) -> list[tuple[str, int, int]]:
        """Every live stream of ``root`` that ``wanted`` accepts: (path, visible tail, created_ms),
        the other shards' included (as reported)."""
        found = super().streams_of(root, pattern, wanted)
        if root == BASE_ROOT and self.peers is not None:
            found += [(path, facts.tail, facts.created_ms) for path, facts in self.remote.items() if wanted(path)]
        return found

    def update_interest(self) -> None:
        """Publish the base surface's subscriptions' patterns and explicit paths (a new
        version only when they changed)."""
        subs = self.manager.by_root.get(BASE_ROOT, {}).values()
        paths = (path for sub in subs for path, link in sub.links.items() if link.explicit)
        self.interest.update((sub.config.pattern for sub in subs if sub.config.pattern is not None), paths)

    def apply(
        self, shard: int, version: str, full: bool, streams: list[tuple[str, int, int]], removed: list[str]
    ) -> None:
        """Shard ``shard``'s report; 409 ``STALE_INTEREST`` if computed for another interest
        version (the reporter then fetches the interest again and reports in full)."""
        manager, peers = self.manager, self.peers
        if version != self.interest.view.version or peers is None:
            raise Conflict("the report was computed for another interest version", code="STALE_INTEREST")
        subs = list(manager.by_root.get(BASE_ROOT, {}).values())
        gone = set(removed)
        if full:
            reported = {path for path, _, _ in streams}
            linked = {path for sub in subs for path in sub.links}
            gone |= {path for path in (*self.remote.paths_of(shard), *linked) if path not in reported}
        for path in gone:
            if peers.shard_of(path) == shard != peers.shard:
                self.remote.remove(path)
                for sub in subs:
                    manager.unlink(sub, path)
        for path, tail, created_ms in streams:
            if peers.shard_of(path) == shard != peers.shard:  # (else not that shard's: ignored)
                self._learn(shard, path, tail, created_ms)

    def _learn(self, shard: int, path: str, tail: int, created_ms: int) -> None:
        """A remote stream's tail, from a report or an answer: kept unless older than the one
        known, then linked and woken like a local stream's new tail."""
        known = self.remote.get(path)
        if known is not None and known.created_ms == created_ms and known.tail > tail:
            return
        if self.remote.put(shard, path, ReportedStream(tail, created_ms)):  # another incarnation
            for sub in self.manager.by_root.get(BASE_ROOT, {}).values():
                self.manager.unlink(sub, path)
        self.manager.seen(BASE_ROOT, path, tail, created_ms)

    async def ask_peers(self, root: str, patterns: tuple[str, ...], paths: tuple[str, ...]) -> None:
        """Learn every other shard's streams ``patterns`` and ``paths`` name, at their tails now,
        before linking them (``ServiceUnavailable`` if a shard does not answer)."""
        peers = self.peers
        if root != BASE_ROOT or peers is None:
            return
        for shard, path, tail, created_ms in await peers.matching(InterestView("", patterns, paths)):
            self._learn(shard, path, tail, created_ms)

    async def catch_up(self, sub: Subscription) -> bool:
        """Ask the other shards for the tails of ``sub``'s streams now (a report may still be on
        its way); whether it learned them (not if a shard does not answer: what is known stands)."""
        if sub.root != BASE_ROOT or self.peers is None:
            return False
        paths = tuple(path for path, link in sub.links.items() if link.explicit and self.is_remote(sub.root, path))
        patterns = (sub.config.pattern,) if sub.config.pattern is not None else ()
        try:
            await self.ask_peers(sub.root, patterns, paths)
        except ServiceUnavailable:
            return False
        return bool(patterns or paths)

    async def refresh(self, sub: Subscription, acks: Iterable[tuple[str, int]], tails: dict[str, int]) -> bool:
        """Ask the shards of remote streams acked past their reported tails for their tails
        now; whether it asked."""
        stale = tuple(sorted({path for path, seq in acks if seq > tails.get(path, 0)}))
        stale = tuple(path for path in stale if self.is_remote(sub.root, path))
        if stale:
            await self.ask_peers(sub.root, (), stale)
        return bool(stale)

    async def append_events(self, sub: Subscription, body: bytes) -> None:
        """Append wake events to ``sub``'s wake stream: in this shard, or through the router
        (producer id per subscription incarnation, epoch = generation: a retry is a duplicate)."""
        wake_stream = sub.config.wake_stream
        assert wake_stream is not None
        if self.peers is not None and self.is_remote(sub.root, wake_stream):
            producer = f"ds-wake-{sub.subscription_id}-{sub.uid}"
            await self.peers.append(wake_stream, body, producer, sub.generation)
        else:
            await super().append_events(sub, body)
