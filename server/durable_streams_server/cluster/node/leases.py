"""Shard leases: who serves a shard, for how long, and when another node may take it.

Theory of operation
-------------------
Each shard has one lease object, ``_cluster/leases/<kkkk>.json`` (``LeaseRecord``), changed
only by conditional writes (``objects``): put-if-absent to create, replace-if-ETag-matches to
change. A write that loses a race changes nothing, so at most one node ever believes a
given version of the lease is its own.

* **Renewal.** The holder rewrites its lease (``beat`` + 1) every ``renew_s``. A renewal
  whose request was *sent* at ``t`` keeps the lease valid for the holder until
  ``t + ttl * (1 - SAFETY)``, measured on the holder's monotonic clock (``Held.valid_until``).
  A holder that cannot renew by then stops its shard's server at once (self-fencing); one
  that finds its ETag replaced has lost the lease and does the same.
* **Expiry.** No node reads another's clock. A contender that sees a lease's ETag unchanged
  for a whole ``ttl`` of its *own* monotonic clock (``Observed.since``) may replace it. The
  version it saw was written by a request sent before it saw it, so the holder stopped at
  least ``ttl * SAFETY`` before the contender takes over, as long as the clocks' rates
  differ by less than that fraction.
* **Release.** A holder that lets go (drain, shutdown) first stops its shard's server
  (which flushes everything it acknowledged into Delta and commits its release of the
  location: ``storage.ownership``), then writes the lease with ``holder`` empty: free at once.

Leases order *who tries*; the Delta log decides *who commits*: a shard's server claims its
location with the next ownership epoch, and a stale owner's commit is refused by Delta
itself. A lease that expires on a node that acknowledged from its local WAL
(``durability == "wal"``) is not taken by another node (``may_take``): its acknowledged
records may exist only on that node's disk, so the shard waits for that node to come back,
or for an operator to give the records up (``adopt_wal``): a node started with ``--take-over
force`` may take the WAL leases that were expired when it started, each once
(``WalAdoption``); a WAL lease that expires later is never taken silently.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Literal

from ...storage.durability import Durability

LeaseState = Literal["starting", "serving", "draining", "released"]
SAFETY = 0.2
"""The fraction of a lease's ttl between its holder's last moment and a contender's first."""


class LeaseFormatError(ValueError):
    """A lease object that is not a lease record."""


@dataclass(frozen=True)
class LeaseRecord:
    """The body of a shard's lease object."""

    shard: int
    holder: str | None = None
    """The holding node's id; ``None``: free."""
    node_url: str | None = None
    """The holder's advertised URL (its router)."""
    url: str | None = None
    """Where the shard is served (its server's advertised URL), once ``serving``."""
    state: LeaseState = "released"
    durability: Durability = Durability.DELTA
    ttl_ms: int = 5000
    beat: int = 0

    @property
    def free(self) -> bool:
        return self.holder is None or self.state == "released"

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, body: bytes) -> LeaseRecord:
        try:
            fields = json.loads(body)
            fields["durability"] = Durability.recorded(fields.get("durability", Durability.DELTA))
            record = cls(**fields)
        except (ValueError, TypeError) as exc:
            raise LeaseFormatError(f"not a lease record: {exc}") from None
        if record.state not in ("starting", "serving", "draining", "released"):
            raise LeaseFormatError(f"unknown lease state {record.state!r}")
        return record

    def next_beat(self, **changes: object) -> LeaseRecord:
        return replace(self, beat=self.beat + 1, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Observed:
    """A lease as one node last saw it: its version, and since when (this node's monotonic
    clock) that version has been the current one."""

    record: LeaseRecord
    etag: str
    since: float

    def seen_again(self, record: LeaseRecord, etag: str, now: float) -> Observed:
        if etag == self.etag:
            return self
        return Observed(record, etag, now)

    def expired(self, now: float) -> bool:
        """Unchanged for a whole ttl of this node's clock (module docstring: expiry)."""
        return now - self.since >= self.record.ttl_ms / 1000


@dataclass(frozen=True)
class Held:
    """A lease this node holds: the version it wrote last, and until when it may act on it."""

    record: LeaseRecord
    etag: str
    valid_until: float

    @staticmethod
    def valid_from(sent_at: float, ttl_ms: int) -> float:
        return sent_at + ttl_ms / 1000 * (1 - SAFETY)


def may_take(seen: Observed, node_id: str, now: float, *, adopt_wal: bool) -> bool:
    """Whether ``node_id`` may replace the lease version it ``seen``."""
    record = seen.record
    if record.free or record.holder == node_id:
        return True
    if not seen.expired(now):
        return False
    return record.durability != Durability.WAL or adopt_wal


def target_count(shards: int, live_nodes: int) -> int:
    """How many shards each of ``live_nodes`` nodes should hold (the balanced share, rounded up)."""
    return -(-shards // max(1, live_nodes))


class WalAdoption:
    """Which expired WAL leases a node started with ``--take-over force`` may take (``may_take``'s
    ``adopt_wal``): the operator meant the shards whose WAL holder was dead at the node's start,
    not every WAL lease that expires while the node runs.

    A shard is a candidate if the first version of its lease this node read (at its start) was
    held by another node with ``durability == "wal"``; it stays one only while that very
    version is current (a holder that beats again was alive), and is given up once used."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._looked: set[int] = set()
        self._candidates: dict[int, str] = {}  # shard -> the etag of the version seen first

    def note(self, shard: int, seen: Observed, node_id: str) -> None:
        """``seen`` is ``shard``'s lease as just read (the first read of it makes it a candidate or not)."""
        if shard not in self._looked:
            self._looked.add(shard)
            record = seen.record
            if self._enabled and not record.free and record.holder != node_id and record.durability == Durability.WAL:
                self._candidates[shard] = seen.etag
        elif self._candidates.get(shard, seen.etag) != seen.etag:
            del self._candidates[shard]  # written again: its holder was alive after this node started

    def allows(self, shard: int, seen: Observed) -> bool:
        return self._candidates.get(shard) == seen.etag

    def used(self, shard: int) -> None:
        self._candidates.pop(shard, None)
