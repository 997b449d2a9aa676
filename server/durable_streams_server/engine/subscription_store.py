"""The subscriptions' durable copy: records in the WAL, rows in Delta, like streams.

Theory of operation
-------------------
Every change of a subscription (configuration, links and acked offsets, generation, the
wake in flight with its lease and retry schedule) is applied to the manager's live
``Subscription`` first (on the event loop, synchronously, like the engine's changes);
``save(sub)`` then submits one ``SubscriptionHeader`` record carrying the subscription's
whole state (its JSON form) and awaits its durability on the path appends use
(``StoragePort.wait_durable``): an answered request is durable across ``kill -9``, on
the WAL or, with ``durability="delta"``, in Delta. Deleting submits a record without
state. The signing keys (``KeyRing``, with the token key) are one ``SigningKeysHeader``
record, written once when they are generated.

``SubscriptionLog`` is what those records are applied to: the transition
(``LiveState.apply``) every subscription record goes through, live and at recovery.
It keeps the newest durable state of every subscription by uid, and the keys; at start
it is loaded from the Delta rows (``Recovery.subscriptions``), then the WAL records
after them are replayed into it, and the manager builds its live subscriptions from it.
A deletion leaves a tombstone state (``type: subscription``, ``deleted``) for the next
flush, so compaction purges the deleted subscription's rows like a removed stream's.

The same records also carry the other state of the reserved namespace, told apart by a
``reserved`` key in their state (``reserved_records``: consumers' progress, deleted
streams' tombstones); ``SubscriptionLog`` keeps those by uid through recovery only, and
hands them to their owners once (``take_reserved``), who keep them from then on.

A subscription's uid is the LSN of its first record (a re-created id gets a new one).
Cost: each record carries one subscription's whole state, so a subscription linked to
very many streams writes that many links per change (per wake: a few records).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..storage.records import (
    SIGNING_KEYS_UID,
    Header,
    Record,
    SigningKeysHeader,
    SubscriptionHeader,
    is_kind,
)
from ..storage.view import StreamState
from .ports import StoragePort
from .reserved_records import ReservedRecords
from .signing import KeyRing
from .subscription_state import Subscription


def reserved_name(sub: Subscription) -> str:
    """The subscription's name in records and Delta rows: never a stream's (``__ds``)."""
    return f"{sub.root}__ds/subscriptions/{sub.subscription_id}"


class SubscriptionLog:
    """The newest durable state of every subscription, and the signing keys."""

    def __init__(self) -> None:
        self.states: dict[int, Mapping[str, Any]] = {}
        self._reserved: dict[int, Mapping[str, Any]] | None = {}
        """The other reserved-namespace states by uid (``reserved_records``), until taken."""
        self.keys: Mapping[str, Any] | None = None

    def _keep(self, uid: int, state: Mapping[str, Any]) -> None:
        if "reserved" not in state:
            self.states[uid] = state
        elif self._reserved is not None:
            self._reserved[uid] = state

    def take_reserved(self) -> dict[int, Mapping[str, Any]]:
        """The recovered reserved-namespace states, handed over once: after recovery their
        owners (consumers, tombstones) keep them, so this log stops keeping a second copy."""
        taken, self._reserved = self._reserved or {}, None
        return taken

    def load(self, rows: Mapping[int, Mapping[str, Any] | None]) -> None:
        """The Delta rows (newest per uid), before the WAL records after them."""
        for uid, state in rows.items():
            if uid == SIGNING_KEYS_UID:
                self.keys = state
            elif state is not None and not state.get("deleted"):
                self._keep(uid, state)

    def apply(self, record: Record[Header]) -> StreamState | None:
        """The transition of both record kinds; a tombstone for the next flush on deletion."""
        if is_kind(record, SigningKeysHeader):
            self.keys = record.header.keys
            return None
        assert is_kind(record, SubscriptionHeader)
        header = record.header
        if header.state is not None:
            self._keep(record.uid, header.state)
            return None
        self.states.pop(record.uid, None)
        if self._reserved is not None:
            self._reserved.pop(record.uid, None)
        return {"type": "subscription", "name": header.name, "tail": 0, "written_ms": header.ts, "deleted": True}


class SubscriptionStore:
    """Submits subscription records and awaits their durability (see the module doc)."""

    def __init__(
        self, storage: StoragePort, apply: Callable[[Record[Header]], object], clock: Callable[[], int]
    ) -> None:
        self.storage = storage
        self._apply = apply
        """The transition (``LiveState.apply``), applied to every record right after submitting it."""
        self._clock = clock
        self._records = ReservedRecords(storage, apply, clock)
        self.keys_lsn = 0
        """The LSN of the signing keys' record (0: they were durable before this start)."""

    def check_writable(self) -> None:
        """Refuse a change up-front while storage could not make it durable soon."""
        self.storage.check_writable()

    def submit(self, sub: Subscription) -> int:
        """Queue ``sub``'s current state (or its deletion) as a record; its LSN."""
        record = self._records.submit(sub.uid or None, reserved_name(sub), None if sub.deleted else sub.to_json())
        sub.uid, sub.last_lsn = record.uid, record.lsn
        return record.lsn

    async def save(self, sub: Subscription) -> None:
        """Make ``sub``'s state as it is now durable (the record is submitted at once)."""
        await self.storage.wait_durable(self.submit(sub))

    async def durable(self, sub: Subscription) -> None:
        """Wait until ``sub``'s newest record is durable (nothing new is written)."""
        await self.storage.wait_durable(sub.last_lsn)

    def submit_keys(self, keys: KeyRing) -> None:
        """Record newly generated keys (once, at the first start)."""
        record = self.storage.submit(SIGNING_KEYS_UID, SigningKeysHeader(keys=keys.to_json(), ts=self._clock()))
        self._apply(record)
        self.keys_lsn = record.lsn

    async def keys_durable(self) -> None:
        await self.storage.wait_durable(self.keys_lsn)
