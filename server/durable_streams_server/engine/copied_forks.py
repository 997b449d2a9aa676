"""Copied forks: a fork whose source lives in another shard of a cluster, as the engine keeps it.

The protocol lets a server fork by copying (PROTOCOL.md 4.2: "copy-on-fork, pointer-based
stitching, or any other mechanism"). Within one shard a fork is a zero-copy link to its
source (``forks``, ``reads``); across shards there is no shared table to stitch from, so
the fork's shard copies what the fork inherits: the source's retained messages up to the
fork point, with their own sequence numbers (the fork's offsets are the source's, no
translation), exported by the source's shard (``cluster.shard.fork_exports``, asked for by
``cluster.shard.fork_copies``). The fork is then an ordinary stream of its shard whose first
sequence is the source's earliest retained one (``Stream.base_seq``): its reads, waits,
read plans and retention need nothing else. It keeps its source's path, fork offset and
sub-offset, so a repeated PUT compares its configuration as a local fork's does
(``forks.config_differences``). Not carried: the inherited messages' append times (the copy's
are its creation time) and their append batches (each inherited message is its own), so a
JSON sub-offset fork *of a copy* at an inherited message can keep at most one value.

The source's shard counts the fork as a link (``fork_links``), so the deletion rules hold
across shards. Removing the fork (DELETE, expiry, a cascade) must remove that link, and
the source's shard may be unreachable then: the removal records a *pending unlink* in the
same synchronous step (``PendingUnlinks``: a reserved record under the fork root's
``__ds`` namespace, durable with the removal), which a background task sends until the
source's shard confirms it, and again after a restart: never dropped. A create records
its intent the same way before asking for the export, so a failure or crash anywhere
between the export and the create's durability leaves a pending unlink, which the task
sends unless the fork's path holds a stream with that link (the create succeeded).

What is here is state, not talk: a copied fork's source and link (``ForkCopy``, ``Stream``), the
pending unlinks' records, the links' counts (``fork_links``). A location holds them whoever
serves it, so every server replays and keeps them alike; asking another shard for an export and
sending the unlinks is the cluster's (``cluster.shard``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .reserved_records import RESERVED_KEY, ReservedRecords, reserved_path, states_of
from .stream import Stream

KIND = "fork_unlink"


@dataclass(frozen=True, slots=True)
class ExportMeta:
    """The source's configuration a fork inherits, and where the fork starts (what an export's
    first frame carries: ``cluster.shard.export_frames``)."""

    name: str
    """The source's path."""
    content_type: str
    ttl_s: int | None
    expires_at: str | None
    expires_at_ms: int | None
    first_seq: int
    """The source's earliest retained message: the first inherited one."""
    fork_seq: int
    """The fork's first own sequence number (``forks.resolve_fork_point``)."""


@dataclass(frozen=True, slots=True)
class ForkCopy:
    """What a copied fork is created from: its source's configuration and the fork point
    (``meta``, inherited from as a local source is: ``forks.ForkSource``), the sub-offset's
    prefix and the inherited messages."""

    link: str
    meta: ExportMeta
    prefix: bytes | None
    messages: list[bytes]


@dataclass(frozen=True, slots=True)
class Pending:
    uid: int
    fork: str
    source: str
    link: str


def reserved_name(fork: str, link: str) -> str:
    return reserved_path(fork, "fork-unlinks", link)


class PendingUnlinks:
    """Links at other shards still to remove, durable until they are (module docstring)."""

    def __init__(self, records: ReservedRecords) -> None:
        self._records = records
        self.by_link: dict[str, Pending] = {}
        self.in_flight: set[str] = set()
        """Links whose create is under way: not sent until it has ended."""
        self.on_added: Callable[[], object] | None = None
        """Told when there is something to send (the sender's wake-up)."""
        self.last_lsn = 0

    def load(self, recovered: Mapping[int, Mapping[str, Any]]) -> None:
        for uid, state in states_of(recovered, KIND).items():
            self.by_link[state["link"]] = Pending(uid, state["fork"], state["source"], state["link"])

    def intend(self, fork: str, source: str, link: str) -> int:
        """Record that ``link`` at ``source``'s shard must go; the record's LSN."""
        if link in self.by_link:
            return self.last_lsn
        state = {RESERVED_KEY: KIND, "fork": fork, "source": source, "link": link}
        record = self._records.submit(None, reserved_name(fork, link), state)
        self.by_link[link] = Pending(record.uid, fork, source, link)
        self.last_lsn = record.lsn
        if self.on_added is not None:
            self.on_added()
        return record.lsn

    def removed(self, stream: Stream) -> None:
        """``stream`` is gone: its link, if it is a copied fork, must go too."""
        if stream.fork_source is not None and stream.fork_link is not None:
            self.intend(stream.name, stream.fork_source, stream.fork_link)

    def due(self) -> list[Pending]:
        return [pending for link, pending in self.by_link.items() if link not in self.in_flight]

    def done(self, link: str) -> None:
        pending = self.by_link.pop(link, None)
        if pending is not None:
            self._records.submit(pending.uid, reserved_name(pending.fork, link), None)
