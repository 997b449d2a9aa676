"""Small durable states of the reserved ``__ds`` namespace beside subscriptions.

Consumers' recorded progress (``consumers``) and deleted streams' tombstones
(``tombstones``) are a few fields each, changed now and then: they ride on the
subscriptions' records (``SubscriptionHeader``: one record carries one state whole, under a
reserved name that is never a stream's) instead of a record kind and a Delta row kind of
their own. So they get, for nothing, what subscriptions have: durability on the appends'
path (WAL, or Delta with ``durability="delta"``), replay at recovery through
``LiveState.apply``, one Delta row per state after a flush, and compaction's purge of a
deleted state's rows. A ``reserved`` key in the state says whose it is
(``SubscriptionLog`` keeps those apart from subscriptions, by uid).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..protocol.ids import BASE_SURFACE_PREFIX
from ..storage.records import Header, Record, SubscriptionHeader
from .buckets import bucket_of
from .ports import StoragePort

RESERVED_KEY = "reserved"


class ReservedRecords:
    """Submits reserved-namespace states (or their deletion) as records, applied at once."""

    def __init__(
        self, storage: StoragePort, apply: Callable[[Record[Header]], object], clock: Callable[[], int]
    ) -> None:
        self.storage = storage
        self._apply = apply
        self._clock = clock

    def submit(self, uid: int | None, name: str, state: Mapping[str, Any] | None) -> Record[Header]:
        """Queue ``state`` (``None``: the deletion of ``uid``) under ``name``; a new state gets
        the record's LSN as its uid. Durable once ``storage.wait_durable(record.lsn)``."""
        header = SubscriptionHeader(name=name, state=state, ts=self._clock())
        record = self.storage.submit(uid or self.storage.next_lsn, header)
        self._apply(record)
        return record

    async def durable(self, lsn: int) -> None:
        await self.storage.wait_durable(lsn)


def stream_root(stream: str) -> str:
    """The root ``stream`` lives under: the base surface's, or its bucket's."""
    located = bucket_of(stream)
    return BASE_SURFACE_PREFIX if located is None else located[0] + "/"


def reserved_path(stream: str, kind: str, leaf: str) -> str:
    """A reserved name for a state of ``kind`` under ``stream``'s root's ``__ds`` namespace."""
    return f"{stream_root(stream)}__ds/{kind}/{leaf}"


def states_of(recovered: Mapping[int, Mapping[str, Any]], kind: str) -> dict[int, Mapping[str, Any]]:
    """The recovered reserved states of one ``kind`` by uid."""
    return {uid: state for uid, state in recovered.items() if state.get(RESERVED_KEY) == kind}
