"""Delivering wakes: webhook attempts with retries, and pull-wake events.

Theory of operation
-------------------
``start`` runs for every new wake as a task on the loop: first the store save that makes
the new generation durable, then the external effect. Webhook: one signed POST
(``WebhookSender``). A 2xx answer marks the wake delivered; with ``{"done": true}`` the
manager auto-acks the wake snapshot, otherwise the lease starts (the lease clock starts
when the receiver accepts the wake rather than when it is issued, so a slow or retried
delivery never expires its own wake). Any other outcome schedules a retry of the *same*
wake (same ``wake_id`` and generation: a receiver that processed a wake whose answer got
lost may still call back) after ``retry_delay_s`` — 1 s doubling to 60 s, ±20 % — with
``next_attempt_ms`` persisted, so after ``kill -9`` the restarted server honours the
schedule (``resume``) and the wake is delivered again, never dropped.

Pull-wake: one ``wake`` event per pending stream, appended to the wake stream in one
append (at least once: a crash between the append and the save writes them again); in a
cluster the wake stream may be another shard's (``subscribed_streams.LocalStreams.append_events``).
If the wake stream is missing the failure is logged and counted; claims still work.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..protocol.errors import ProtocolError
from ..protocol.webhook_rules import IPNetwork, retry_delay_s
from .signing import KeyRing
from .subscription_state import Subscription, Wake
from .subscription_store import SubscriptionStore
from .webhooks import WebhookSender

if TYPE_CHECKING:
    from .engine import Engine
    from .subscribed_streams import LocalStreams

log = logging.getLogger("durable_streams_server.subscriptions")


@dataclass(frozen=True, slots=True)
class SubscriptionSettings:
    allowed_networks: tuple[IPNetwork, ...] = ()
    """Private networks webhooks may target (``--allow-private-webhook-urls``)."""
    retry_initial_s: float = 1.0
    retry_max_s: float = 60.0
    delivery_timeout_s: float = 10.0


class WakeOwner(Protocol):
    """What deliveries need from the subscription manager."""

    engine: Engine
    settings: SubscriptionSettings
    store: SubscriptionStore
    keys: KeyRing
    stats: Counter[str]
    clock: Callable[[], int]

    @property
    def streams(self) -> LocalStreams: ...

    def tails(self, sub: Subscription) -> dict[str, int]: ...

    def token(self, sub: Subscription, wake: Wake, kind: str) -> str: ...

    def schedule(self, sub: Subscription, at_ms: int | None, action: Callable[[], None]) -> None: ...

    def arm_lease(self, sub: Subscription, wake: Wake) -> None: ...

    def finish(self, sub: Subscription, acks: dict[str, int]) -> bool: ...


class Deliveries:
    def __init__(self, manager: WakeOwner) -> None:
        self.manager = manager
        settings = manager.settings
        self.sender = WebhookSender(settings.allowed_networks, settings.delivery_timeout_s)
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("subscription task failed", exc_info=task.exception())

    def persist(self, sub: Subscription) -> None:
        self.spawn(self.manager.store.save(sub))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.sender.close()

    def start(self, sub: Subscription, wake: Wake) -> None:
        self.spawn(self._saved_then(sub, wake))

    async def _saved_then(self, sub: Subscription, wake: Wake) -> None:
        await self.manager.store.save(sub)
        if sub.config.type == "webhook":
            await self.attempt(sub, wake)
        else:
            await self.write_events(sub, wake)

    def resume(self, sub: Subscription, wake: Wake) -> None:
        """After a restart: carry on with the wake the last run left in flight."""
        manager = self.manager
        if sub.config.type == "webhook" and not wake.delivered:
            manager.schedule(sub, wake.next_attempt_ms or manager.clock(), lambda: self._retry(sub, wake))
        elif wake.holder is not None or sub.config.type == "webhook":
            if wake.lease_expires_ms is None:
                wake.lease_expires_ms = manager.clock() + sub.config.lease_ttl_ms
            manager.arm_lease(sub, wake)
        elif not wake.delivered:
            self.spawn(self.write_events(sub, wake))

    def _retry(self, sub: Subscription, wake: Wake) -> None:
        if wake.attempts:
            self.manager.stats["retries"] += 1
        self.spawn(self.attempt(sub, wake))

    async def attempt(self, sub: Subscription, wake: Wake) -> None:
        manager = self.manager
        if sub.wake is not wake or sub.deleted:
            return
        url = sub.config.webhook_url
        assert url is not None
        body = json.dumps(
            {
                "subscription_id": sub.subscription_id,
                "wake_id": wake.wake_id,
                "generation": wake.generation,
                "streams": sub.stream_views(manager.tails(sub), wake.tails),
                "callback_url": f"{sub.root_url}__ds/subscriptions/{sub.subscription_id}/callback",
                "callback_token": manager.token(sub, wake, "callback"),
            },
            separators=(",", ":"),
        ).encode()
        signature = manager.keys.sign(manager.clock() // 1000, body)
        result = await self.sender.deliver(url, body, signature)
        if sub.wake is not wake or sub.deleted:
            return  # answered by a callback meanwhile, or deleted: nothing to record
        if result.ok:
            manager.stats["deliveries"] += 1
            wake.delivered, wake.attempts, wake.next_attempt_ms = True, 0, None
            if result.done:
                manager.finish(sub, wake.tails)
            else:
                wake.holder = "webhook"
                wake.lease_expires_ms = manager.clock() + sub.config.lease_ttl_ms
                manager.arm_lease(sub, wake)
        else:
            manager.stats["delivery_failures"] += 1
            wake.attempts += 1
            settings = manager.settings
            delay_s = retry_delay_s(wake.attempts, settings.retry_initial_s, settings.retry_max_s)
            wake.next_attempt_ms = manager.clock() + int(delay_s * 1000)
            log.warning(
                "webhook delivery failed",
                extra={
                    "subscription": sub.key,
                    "attempt": wake.attempts,
                    "retry_in_s": round(delay_s, 3),
                    "error": result.error,
                },
            )
            manager.schedule(sub, wake.next_attempt_ms, lambda: self._retry(sub, wake))
        await manager.store.save(sub)

    async def write_events(self, sub: Subscription, wake: Wake) -> None:
        manager = self.manager
        assert sub.config.wake_stream is not None
        events = [
            {
                "type": "wake",
                "subscription_id": sub.subscription_id,
                "stream": path,
                "generation": wake.generation,
                "ts": manager.clock(),
            }
            for path in sorted(sub.pending(wake.tails))
        ]
        if not events:
            wake.delivered = True
            return
        try:
            await manager.streams.append_events(sub, json.dumps(events).encode())
        except ProtocolError as error:
            manager.stats["delivery_failures"] += 1
            log.warning(
                "cannot write wake events", extra={"subscription": sub.key, "error": f"{error.code}: {error.message}"}
            )
            return
        manager.stats["wake_events"] += len(events)
        if sub.wake is wake:
            wake.delivered = True
            await manager.store.save(sub)
