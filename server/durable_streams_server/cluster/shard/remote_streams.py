"""Base-surface streams of other shards, as the subscriptions' home shard knows them.

Theory of operation
-------------------
In a cluster of more than one shard the base surface's reserved namespace (its
subscriptions, cursors, wakes, leases) lives in one shard, its *home*; the streams its
patterns may match live in every shard. The home learns about the other shards' streams
through **tail reports**, never by reading their storage:

* ``Interest`` is what the home's base-surface subscriptions may want: their patterns and
  explicitly linked paths, with a version. The version is a random per-start nonce plus a
  counter bumped by every change of the set, so a restarted home never repeats a version
  a reporter still holds. Every other shard server fetches it (long-poll on the version,
  through the node's router) and keeps it.
* A shard server reports each base-surface stream of its own matching the interest to the
  home: ``(path, visible tail, created_ms)`` when a new tail becomes durable, and its
  removal; coalesced, retried until acknowledged; and a **full report** (every matching
  stream) whenever its interest version changes or it (re)starts. A report names the
  interest version it was computed against; the home refuses one of another version (409),
  the reporter then fetches the interest again and sends a full report: so what is missing
  from a full report of the current version is gone, and a lost report or a restarted home
  is repaired by the next full report.
* ``RemoteStreams`` keeps each remote stream's last reported facts (tail, created_ms) by
  shard; the subscription manager uses them where it uses its engine's streams.
* Creating a subscription asks every other shard for its matching streams with their tails
  (``peers.RouterPeers.matching``) before answering, so existing streams are linked at their tails;
  a shard that does not answer fails the creation (503), never a subscription missing one.
* A pull-wake subscription's wake stream may live in another shard: its wake events are
  appended through the router (``peers.RouterPeers.append``) with producer headers (id per
  subscription incarnation, epoch = the wake's generation, seq 0), so a retry is idempotent.

The subscription manager sees streams through the engine's port
(``engine.subscribed_streams.LocalStreams``); a shard server's assembly (``serving``) plugs in
the one that knows other shards' streams (``shard_reports``), over the HTTP peers (``peers``,
``reporter``) and the internal routes (``internal``). Clocks: ``created_ms`` of a remote
stream is compared with a subscription's ``created_ms``, so the shard servers' clocks are
assumed close (one node, or NTP).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...protocol.ids import BASE_SURFACE_PREFIX
from ...protocol.subscriptions import glob_match, literal_prefix

if TYPE_CHECKING:
    from ...engine.engine import Engine

BASE_ROOT = BASE_SURFACE_PREFIX
"""The base surface's root: its streams' names start with it."""


@dataclass(frozen=True, slots=True)
class ReportedStream:
    tail: int
    created_ms: int


@dataclass(frozen=True, slots=True)
class InterestView:
    """One version of the home's interest (what reporters hold)."""

    version: str
    patterns: tuple[str, ...]
    paths: tuple[str, ...]

    def wants(self, path: str) -> bool:
        return path in self.paths or any(glob_match(pattern, path) for pattern in self.patterns)

    def to_json(self) -> dict[str, object]:
        return {"version": self.version, "patterns": list(self.patterns), "paths": list(self.paths)}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> InterestView:
        patterns, paths = data.get("patterns"), data.get("paths")
        if not isinstance(patterns, list) or not isinstance(paths, list) or not isinstance(data.get("version"), str):
            raise ValueError("an interest is {version: str, patterns: [str], paths: [str]}")
        return cls(str(data["version"]), tuple(str(p) for p in patterns), tuple(str(p) for p in paths))


class Interest:
    """The home's current interest and a way to wait for its next version (module doc)."""

    def __init__(self) -> None:
        self._nonce = secrets.token_hex(6)
        self._counter = 0
        self._changed = asyncio.Event()
        self.view = InterestView(f"{self._nonce}.0", (), ())

    def update(self, patterns: Iterable[str], paths: Iterable[str]) -> None:
        view = InterestView("", tuple(sorted(set(patterns))), tuple(sorted(set(paths))))
        if (view.patterns, view.paths) == (self.view.patterns, self.view.paths) and self._counter:
            return
        self._counter += 1
        self.view = InterestView(f"{self._nonce}.{self._counter}", view.patterns, view.paths)
        self._changed.set()
        self._changed = asyncio.Event()

    async def after(self, version: str, timeout_s: float, until: asyncio.Future[None] | None = None) -> InterestView:
        """The current view, once it is not ``version`` (or after ``timeout_s``, or once ``until``
        is done: the server stops)."""
        if self.view.version == version:
            changed = asyncio.ensure_future(self._changed.wait())
            waits: list[asyncio.Future[Any]] = [changed] if until is None else [changed, until]
            try:
                await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
        return self.view


def matching_streams(engine: Engine, interest: InterestView) -> list[tuple[str, int, int]]:
    """This engine's live base-surface streams ``interest`` wants: (path, visible tail, created_ms)."""
    under = [literal_prefix(pattern) for pattern in interest.patterns]
    return engine.live_streams_under(BASE_ROOT, [*under, *interest.paths], interest.wants)


class RemoteStreams:
    """Other shards' streams by path, as their last reports said (module doc)."""

    def __init__(self) -> None:
        self.facts: dict[str, ReportedStream] = {}
        self.shard_of: dict[str, int] = {}

    def get(self, path: str) -> ReportedStream | None:
        return self.facts.get(path)

    def items(self) -> list[tuple[str, ReportedStream]]:
        return list(self.facts.items())

    def put(self, shard: int, path: str, facts: ReportedStream) -> bool:
        """Record ``facts``; True if the stream is another incarnation than the one known."""
        known = self.facts.get(path)
        self.facts[path], self.shard_of[path] = facts, shard
        return known is not None and known.created_ms != facts.created_ms

    def remove(self, path: str) -> None:
        self.facts.pop(path, None)
        self.shard_of.pop(path, None)

    def paths_of(self, shard: int) -> list[str]:
        return [path for path, owner in self.shard_of.items() if owner == shard]
