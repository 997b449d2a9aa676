"""Subscriptions' live state: membership, wakes, generations, leases, and their timers.

Theory of operation
-------------------
Everything runs on the event loop. Each operation changes memory synchronously (no
``await`` in between, so operations on one subscription are serialized like the
engine's appends), then awaits ``store.save(sub)`` before answering, so an answer is
durable: a subscription record in the WAL (or in Delta), see ``subscription_store``.
External effects of a new wake (the webhook POST, the wake event) happen only after
the wake's generation is durable, so a restart never hands the same generation to a
second wake.

Membership: creating a subscription links every existing stream its pattern matches at
the stream's visible tail and each explicit stream at its tail (0 when it does not exist
yet). The engine calls ``on_visible`` when a stream's new tail becomes durable: a
matching stream not linked yet is new since the subscription, so it is linked at 0
(its first data is pending), and pending work wakes the subscription. ``on_removed``
drops glob links of deleted streams (an explicit link stays, reset to 0). At start-up
``reconcile`` repairs what a crash between a stream change and the next save left out:
unlinked matching streams are linked at 0 if created after the subscription, else at
their tail. The streams a subscription sees are its ``streams``' (``subscribed_streams``): this
engine's own on a single server; in a cluster of several shards the base surface's subscriptions
also see the other shards' streams, as their tail reports describe them
(``cluster.shard.shard_reports``): a report is ``seen``/``unlink`` like the hooks, and a remote
stream's links are repaired by the next full report rather than at start-up.

Wakes: an idle subscription with pending work gets a new wake (generation + 1).
Webhook: a signed POST (``Deliveries``); 2xx ``{"done": true}`` auto-acks the wake
snapshot; other 2xx starts the lease (extended by callbacks); a failure schedules a
retry (1 s doubling to 60 s, ±20 %; ``next_attempt_ms`` is persisted and honoured after
a restart). Pull-wake: wake events go to the wake stream; ``claim`` takes the lease.
When a lease expires the wake is dropped and, if work is pending, a new one issued.
One timer per subscription tracks its next deadline (retry or lease expiry).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..protocol.errors import BadRequest, Conflict, NotFound
from ..protocol.subscriptions import AlreadyClaimed, SubscriptionConfig, WakeReport, fenced
from ..protocol.wake_tokens import WakeClaim, issue, verify
from .reserved_records import stream_root
from .signing import KeyRing
from .subscribed_streams import LocalStreams
from .subscription_state import Link, Subscription, Wake
from .subscription_store import SubscriptionStore
from .wakes import Deliveries, SubscriptionSettings

if TYPE_CHECKING:
    from .engine import Engine
    from .stream import Stream
    from .types import VisibleStream

log = logging.getLogger("durable_streams_server.subscriptions")


class SubscriptionManager:
    def __init__(self, engine: Engine, settings: SubscriptionSettings | None = None) -> None:
        self.engine = engine
        self.settings = settings or SubscriptionSettings()
        self.clock: Callable[[], int] = engine.clock
        self.by_root: dict[str, dict[str, Subscription]] = {}
        self.store = SubscriptionStore(engine.storage, engine.live.apply, self.clock)
        self.keys = KeyRing.generate(self.clock())
        self.stats: Counter[str] = Counter()
        """deliveries, delivery_failures, retries, lease_expiries, wake_events (for /metrics)."""
        self.deliveries = Deliveries(self)
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.streams = LocalStreams(self)
        """The streams the subscriptions see (``subscribed_streams``): this engine's; on a cluster's
        shard server, the other shards' too (the server's assembly sets it before ``start``)."""

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """Load the recovered state, reconcile with the engine's streams (recording what
        that changed), attach hooks, resume wakes. The first start generates the keys."""
        recovered = self.engine.live.subscriptions
        if recovered.keys is not None:
            self.keys = KeyRing.from_json(dict(recovered.keys))
        else:
            self.store.submit_keys(self.keys)
        for uid, state in recovered.states.items():
            sub = Subscription.from_json(dict(state))
            sub.uid = uid
            self.by_root.setdefault(sub.root, {})[sub.subscription_id] = sub
        for sub in self.all():
            before = sub.to_json()
            self._reconcile(sub)
            if sub.to_json() != before:
                self.store.submit(sub)
        self.engine.live.hooks = self
        self.streams.start()
        for sub in self.all():
            self._resume(sub)

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        await self.streams.close()
        await self.deliveries.close()

    def all(self) -> list[Subscription]:
        return [sub for subs in self.by_root.values() for sub in subs.values()]

    # -- streams ----------------------------------------------------------------------

    def tails(self, sub: Subscription) -> dict[str, int]:
        """Linked path -> tail; a remote stream not reported yet counts as caught up."""
        tails = {}
        for path, link in sub.links.items():
            tail = self.streams.tail(sub.root, path)
            tails[path] = tail if tail is not None else link.acked if self.streams.is_remote(sub.root, path) else 0
        return tails

    def _reconcile(self, sub: Subscription) -> None:
        """Repair local links at start (remote ones are repaired by full tail reports)."""
        for path, tail, created_ms in self._matching(sub):
            if path not in sub.links:
                sub.links[path] = Link(glob=True, acked=0 if created_ms >= sub.created_ms else tail)
        for path in list(sub.links):
            if not self.streams.is_remote(sub.root, path) and self.streams.tail(sub.root, path) is None:
                self.unlink(sub, path)

    def _matching(self, sub: Subscription) -> list[tuple[str, int, int]]:
        """The live streams ``sub``'s pattern links: (path, visible tail, created_ms)."""
        pattern = sub.config.pattern
        if pattern is None:
            return []
        return self.streams.streams_of(sub.root, pattern, lambda path: self.matches(sub, path))

    @staticmethod
    def unlink(sub: Subscription, path: str) -> None:
        """The linked stream is gone: a glob link is dropped, an explicit one reset to 0."""
        link = sub.links.get(path)
        if link is not None and link.explicit:
            link.glob, link.acked = False, 0
        elif link is not None:
            del sub.links[path]

    def matches(self, sub: Subscription, path: str) -> bool:
        """Glob membership; never a pull-wake subscription's wake stream (wake events would
        otherwise wake subscriptions, possibly each other, forever)."""
        if not sub.matches(path) or path == sub.config.wake_stream:
            return False
        return all(other.config.wake_stream != path for other in self.by_root.get(sub.root, {}).values())

    def on_visible(self, stream: VisibleStream) -> None:
        """A stream's new tail is durable (created or appended): link it, wake subscribers."""
        root = stream_root(stream.name)
        self.seen(root, stream.name[len(root) :], stream.visible_tail, None)
        self.streams.noted(stream, removed=False)

    def seen(self, root: str, path: str, tail: int, created_ms: int | None) -> None:
        """A new tail: a matching stream not linked yet is linked (at 0 if created after the
        subscription, or when ``created_ms`` is unknown: a local stream's first tail), and
        pending work wakes its subscribers."""
        for sub in self.by_root.get(root, {}).values():
            link = sub.links.get(path)
            if link is None and self.matches(sub, path):
                after = created_ms is None or created_ms >= sub.created_ms
                link = sub.links[path] = Link(glob=True, acked=0 if after else tail)
            if link is not None and tail > link.acked:
                self.kick(sub)

    def on_removed(self, stream: Stream) -> None:
        root = stream_root(stream.name)
        for sub in self.by_root.get(root, {}).values():
            self.unlink(sub, stream.name[len(root) :])
        self.streams.noted(stream, removed=True)

    # -- control API ------------------------------------------------------------------

    def get(self, root: str, subscription_id: str) -> Subscription:
        sub = self.by_root.get(root, {}).get(subscription_id)
        if sub is None:
            raise NotFound(f"subscription {subscription_id!r} not found", code="SUBSCRIPTION_NOT_FOUND")
        return sub

    async def put(
        self, root: str, subscription_id: str, config: SubscriptionConfig, root_url: str
    ) -> tuple[bool, Subscription]:
        self.store.check_writable()
        now = self.clock()
        existing = self.by_root.get(root, {}).get(subscription_id)
        if existing is None:
            await self.streams.ask_peers(root, (config.pattern,) if config.pattern is not None else (), config.streams)
            existing = self.by_root.get(root, {}).get(subscription_id)
        if existing is not None:
            if existing.config.config_hash != config.config_hash:
                raise Conflict(
                    f"subscription {subscription_id!r} exists with a different configuration",
                    code="SUBSCRIPTION_EXISTS",
                )
            await self.store.durable(existing)
            return False, existing
        sub = Subscription(root, subscription_id, config, now, root_url)
        for path, tail, _ in self._matching(sub):
            sub.links[path] = Link(glob=True, acked=tail)
        self._link_explicit(sub, config.streams)
        self.by_root.setdefault(root, {})[subscription_id] = sub
        self.streams.update_interest()
        await self.store.save(sub)
        self.kick(sub)
        return True, sub

    def _link_explicit(self, sub: Subscription, paths: tuple[str, ...]) -> None:
        for path in paths:
            link = sub.links.get(path)
            if link is None:
                link = sub.links[path] = Link(acked=self.streams.tail(sub.root, path) or 0)
            link.explicit = True

    async def delete(self, root: str, subscription_id: str) -> None:
        self.store.check_writable()
        sub = self.get(root, subscription_id)
        sub.deleted = True
        del self.by_root[root][subscription_id]
        self._cancel_timer(sub)
        self.streams.update_interest()
        await self.store.save(sub)

    async def add_streams(self, root: str, subscription_id: str, paths: tuple[str, ...]) -> None:
        self.store.check_writable()
        self.get(root, subscription_id)
        await self.streams.ask_peers(root, (), paths)
        sub = self.get(root, subscription_id)
        self._link_explicit(sub, paths)
        self.streams.update_interest()
        await self.store.save(sub)
        self.kick(sub)

    async def remove_stream(self, root: str, subscription_id: str, path: str) -> None:
        self.store.check_writable()
        sub = self.get(root, subscription_id)
        link = sub.links.get(path)
        if link is not None and link.explicit:
            link.explicit = False
            if self.matches(sub, path) and self.streams.tail(root, path) is not None:
                link.glob = True
            else:
                del sub.links[path]
        self.streams.update_interest()
        await self.store.save(sub)

    # -- wakes ------------------------------------------------------------------------

    def kick(self, sub: Subscription) -> None:
        """Issue a wake if the subscription is idle and has pending work."""
        if sub.deleted or sub.wake is not None:
            return
        tails = self.tails(sub)
        if not sub.pending(tails):
            return
        sub.generation += 1
        sub.wake = Wake(f"w_{secrets.token_urlsafe(12)}", sub.generation, tails)
        self.deliveries.start(sub, sub.wake)

    def token(self, sub: Subscription, wake: Wake, kind: str) -> str:
        return issue(self.keys.token_key, WakeClaim(sub.key, wake.generation, wake.wake_id, kind))

    def schedule(self, sub: Subscription, at_ms: int | None, action: Callable[[], None]) -> None:
        self._cancel_timer(sub)
        if at_ms is not None:
            delay = max(0.0, (at_ms - self.clock()) / 1000)
            self._timers[sub.key] = asyncio.get_running_loop().call_later(delay, action)

    def _cancel_timer(self, sub: Subscription) -> None:
        timer = self._timers.pop(sub.key, None)
        if timer is not None:
            timer.cancel()

    def arm_lease(self, sub: Subscription, wake: Wake) -> None:
        self.schedule(sub, wake.lease_expires_ms, lambda: self._expire(sub, wake))

    def _expire(self, sub: Subscription, wake: Wake) -> None:
        if sub.wake is not wake or wake.lease_expires_ms is None:
            return
        if wake.lease_expires_ms > self.clock():
            self.arm_lease(sub, wake)
            return
        self.stats["lease_expiries"] += 1
        log.info("lease expired", extra={"subscription": sub.key, "generation": wake.generation})
        self.finish(sub, {})

    def finish(self, sub: Subscription, acks: dict[str, int]) -> bool:
        """End the current wake after applying ``acks``; True if work remains (next wake)."""
        sub.apply_acks(acks)
        sub.wake = None
        self._cancel_timer(sub)
        pending = bool(sub.pending(self.tails(sub)))
        self.kick(sub)
        if not pending:
            self.deliveries.persist(sub)
        return pending

    def _resume(self, sub: Subscription) -> None:
        wake = sub.wake
        if wake is None:
            self.kick(sub)
        else:
            self.deliveries.resume(sub, wake)

    # -- worker requests ----------------------------------------------------------------

    async def claim(
        self, root: str, subscription_id: str, worker: str, *, fresh: bool = False
    ) -> dict[str, Any] | None:
        """Take the lease of the current (or a new) wake; ``None`` when nothing is pending (after
        asking other shards for their tails: an append's report may still be on its way)."""
        self.store.check_writable()
        sub = self.get(root, subscription_id)
        if sub.config.type != "pull-wake":
            raise BadRequest("claim is for pull-wake subscriptions", code="NOT_PULL_WAKE")
        now = self.clock()
        wake = sub.wake
        if wake is not None and wake.holder is not None and wake.lease_expires_ms is not None:
            if wake.lease_expires_ms > now:
                raise AlreadyClaimed(wake.holder, wake.generation)
            self.stats["lease_expiries"] += 1
            self.finish(sub, {})
            wake = sub.wake
        tails = self.tails(sub)
        if wake is None:
            if not sub.pending(tails):
                caught_up = not fresh and await self.streams.catch_up(sub)
                return await self.claim(root, subscription_id, worker, fresh=True) if caught_up else None
            sub.generation += 1
            wake = sub.wake = Wake(f"w_{secrets.token_urlsafe(12)}", sub.generation, tails, delivered=True)
        wake.tails = tails
        wake.holder, wake.lease_expires_ms = worker, now + sub.config.lease_ttl_ms
        self.arm_lease(sub, wake)
        await self.store.save(sub)
        return {
            "wake_id": wake.wake_id,
            "generation": wake.generation,
            "token": self.token(sub, wake, "claim"),
            "streams": sub.stream_views(tails, wake.tails),
            "lease_ttl_ms": sub.config.lease_ttl_ms,
        }

    async def report(
        self, root: str, subscription_id: str, token: str, report: WakeReport, kind: str, *, fresh: bool = False
    ) -> dict[str, bool] | None:
        """A callback (webhook) or ack (pull-wake) with ``report``; release when ``kind`` is
        ``"release"`` (returns ``None``). An ack past a remote stream's reported tail asks its
        shard for the tail first (a report may not have arrived yet), then checks again."""
        self.store.check_writable()
        sub = self.get(root, subscription_id)
        claim = verify(self.keys.token_key, token)
        expected = "callback" if sub.config.type == "webhook" else "claim"
        if claim.subscription != sub.key or claim.kind != expected:
            raise fenced("the token was issued for another subscription or wake kind")
        wake = sub.check_current(report.generation, report.wake_id)
        if (claim.generation, claim.wake_id) != (wake.generation, wake.wake_id):
            raise fenced("the token belongs to another wake")
        if expected == "claim" and wake.holder is None:
            raise fenced("the wake's lease was released or expired")
        if not fresh and await self.streams.refresh(sub, report.acks, self.tails(sub)):
            return await self.report(root, subscription_id, token, report, kind, fresh=True)
        acks = self._checked_acks(sub, report)
        if kind == "release":
            self.finish(sub, {})
            await self.store.save(sub)
            return None
        if report.done:
            next_wake = self.finish(sub, acks)
        else:
            sub.apply_acks(acks)
            wake.lease_expires_ms = self.clock() + sub.config.lease_ttl_ms
            self.arm_lease(sub, wake)
            next_wake = False
        await self.store.save(sub)
        return {"ok": True, "next_wake": next_wake}

    def _checked_acks(self, sub: Subscription, report: WakeReport) -> dict[str, int]:
        tails = self.tails(sub)
        acks: dict[str, int] = {}
        for path, seq in report.acks:
            if path not in sub.links:
                raise BadRequest(f"stream {path!r} is not linked to this subscription", code="UNKNOWN_STREAM")
            if seq > tails.get(path, 0):
                raise BadRequest(f"the ack for {path!r} is beyond the stream's tail", code="INVALID_OFFSET")
            acks[path] = max(acks.get(path, 0), seq)
        return acks
