"""A node's view of the leases it does not hold: each one's version as last read, and since when.

The supervisor's *look* step (``supervisor``) reads every lease it does not hold, once a tick. What
it keeps per shard is an ``Observed`` (``leases``): the record, its ETag, and when this node
first saw that version, timed when the read answered (a version written during the sweep is
never dated before it was read: the safety gap of ``leases`` rests on it). A lease object that
is not a lease record is remembered by its ETag, logged once, and never taken: its holder is
unknown, so the shard stays unavailable until an operator removes the object. The balance
rule (``balance``) counts holders from this view; the routing table (``routes``) is built from it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

from ...storage.durability import Durability
from .leases import LeaseFormatError, LeaseRecord, Observed, WalAdoption
from .objects import ConditionalObjects
from .shards import lease_key

log = logging.getLogger("durable_streams_server.cluster")


class LeaseView:
    def __init__(self, objects: ConditionalObjects, shards: int, node_id: str, adoption: WalAdoption) -> None:
        self._objects = objects
        self._shards = shards
        self._node_id = node_id
        self._adoption = adoption
        self.seen: dict[int, Observed] = {}
        self.unreadable: dict[int, str] = {}
        """shard -> the ETag of a lease object that is not a lease."""

    def look(self, held: Collection[int]) -> None:
        """Read every lease but those in ``held`` (this node's own)."""
        for shard in range(self._shards):
            if shard in held:
                continue
            found = self._objects.get(lease_key(shard))
            now = time.monotonic()  # a version is first seen when its read answered (``leases``: SAFETY)
            if found is None:
                self.seen.pop(shard, None)
                self.unreadable.pop(shard, None)
                continue
            try:
                record = LeaseRecord.from_bytes(found.body)
            except LeaseFormatError as exc:
                if self.unreadable.get(shard) != found.etag:
                    log.error(
                        "unreadable lease: the shard is left alone until an operator removes the object",
                        extra={"shard": shard, "key": lease_key(shard), "error": str(exc)},
                    )
                self.unreadable[shard] = found.etag
                self.seen.pop(shard, None)
                continue
            self.unreadable.pop(shard, None)
            seen = self.seen.get(shard)
            seen = Observed(record, found.etag, now) if seen is None else seen.seen_again(record, found.etag, now)
            self.seen[shard] = seen
            self._adoption.note(shard, seen, self._node_id)

    def anyone_holds(self) -> bool:
        return any(not seen.record.free for seen in self.seen.values())

    def held_by(self, live_nodes: Collection[str], held_here: int) -> dict[str, int]:
        """How many shards each live node holds, as this node last saw the leases (``held_here``:
        this node's own count)."""
        counts = dict.fromkeys(live_nodes, 0)
        now = time.monotonic()
        for seen in self.seen.values():
            holder = seen.record.holder
            if holder in counts and not seen.record.free and not seen.expired(now):
                counts[holder] += 1
        counts[self._node_id] = held_here
        return counts

    def names_this_wal(self, shard: int) -> bool:
        """Whether ``shard``'s lease still names this node as the WAL owner it lost it as (its renewal
        failed): no other node may take it (its records may be on this disk), so this node takes it
        back whatever its share, and drains it later as any shard above its share."""
        seen = self.seen.get(shard)
        record = seen.record if seen is not None else None
        if record is None or record.free:
            return False
        return record.holder == self._node_id and record.durability == Durability.WAL
