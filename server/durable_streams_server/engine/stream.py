"""One stream's live state: configuration, tail, producers, closure, fork links, and the
in-memory tail of its messages.

Two tails are kept. ``tail``/``closed`` are the *applied* state that validates the next
append; ``visible_tail``/``visible_closed`` trail them until the records behind them are
durable, and are all that readers see. So no reader ever observes data a crash could
still take back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..protocol.headers import JSON_CONTENT_TYPE, normalize_content_type
from ..protocol.producers import ProducerState
from ..storage.message_batch import MessageBatch
from .memory_tail import MemoryTail
from .retention_state import RetentionState

log = logging.getLogger("durable_streams_server.engine")

_ZERO_BY_DEFAULT = (
    "fork_seq",
    "fork_sub_offset",
    "base_seq",
    "last_access_ms",
    "last_write_ms",
    "bytes_total",
    "snapshot_lsn",
)
"""The counters ``from_state`` takes as 0 when absent (``to_state`` leaves them out at 0)."""
_NONE_BY_DEFAULT = (
    "ttl_s",
    "expires_at",
    "expires_at_ms",
    "closed",
    "stream_seq",
    "fork_of",
    "fork_offset",
    "fork_source",
    "fork_link",
    "soft_deleted",
    "snapshot_seq",
    "snapshot_content_type",
)
"""The fields ``from_state`` takes as ``None`` (or ``False``) when absent (``to_state`` leaves them out so)."""
_OPTIONAL = frozenset((*_NONE_BY_DEFAULT, *_ZERO_BY_DEFAULT, "closed_by", "producers", "retention"))
"""What a state may hold beside the five every state has."""


def incarnation(uid: int, created_ms: int) -> str:
    """An incarnation of a path: the uid (the create record's log position, never reused by this
    data directory) and the creation time (so a wiped data directory does not repeat one)."""
    return f"{uid}-{created_ms}"


def expiry_passed(expires_at_ms: int | None, ttl_s: int | None, last_access_ms: int, now_ms: int) -> bool:
    """Whether a stream with these limits is expired at ``now_ms``: past its ``Stream-Expires-At``, or
    unused for its sliding ``Stream-TTL`` (``Stream.expired``; a sleeping stream's state: ``cold_appends``)."""
    if expires_at_ms is not None and now_ms >= expires_at_ms:
        return True
    return ttl_s is not None and now_ms >= last_access_ms + ttl_s * 1000


@dataclass(slots=True)
class Stream:
    name: str
    uid: int
    content_type: str
    created_ms: int
    ttl_s: int | None = None
    expires_at: str | None = None
    expires_at_ms: int | None = None
    closed: bool = False
    closed_by: tuple[str, int, int] | None = None
    tail: int = 0
    producers: dict[str, ProducerState] = field(default_factory=dict)
    stream_seq: str | None = None
    fork_of: int | None = None
    fork_seq: int = 0
    fork_offset: str | None = None
    fork_sub_offset: int = 0
    fork_source: str | None = None
    """A copied fork's source, a stream of another shard (``copied_forks``): its path."""
    fork_link: str | None = None
    """A copied fork's link id at its source's shard (removed when the fork is: ``copied_forks``)."""
    base_seq: int = 0
    """A copied fork's first message: its source had retained nothing older."""
    soft_deleted: bool = False
    last_access_ms: int = 0
    last_write_ms: int = 0
    bytes_total: int = 0
    """Bytes of every message appended (since this count was kept: older state has 0), for
    consumers' lag in bytes (``consumers``): one addition per append."""
    snapshot_seq: int | None = None
    snapshot_content_type: str | None = None
    snapshot_lsn: int = 0
    retention: RetentionState | None = None
    """A retention policy's state (``retention_state``), for a stream that has or had one."""
    # Derived, never persisted.
    media_type: str = field(init=False)
    """``content_type`` without parameters, lower-cased: what content types compare by."""
    is_json: bool = field(init=False)
    forks: int = 0
    visible_tail: int = 0
    visible_closed: bool = False
    last_lsn: int = 0
    mem_base: int = 0
    mem: MemoryTail = field(default_factory=MemoryTail)
    """The messages from ``mem_base`` on (``engine.memory_tail``)."""
    mem_bytes: int = 0
    batches: dict[int, int] = field(default_factory=dict)
    snapshot_data: bytes | None = None
    """The latest snapshot's blob while it is not yet in Delta (afterwards read from there)."""
    flushed_tail: int = 0
    flushed_mem_bytes: int = 0
    """Bytes of the in-memory messages below ``flushed_tail``: the part of the tail cache
    that can be let go (reads then go to Delta); the rest is not in Delta yet."""
    waiters: dict[asyncio.Future[None], Callable[[], object] | None] = field(default_factory=dict)
    """Readers waiting for visible data (``reads.wait_for_change``), each with what to run
    at the wake itself, if anything."""

    def __post_init__(self) -> None:
        self.media_type = normalize_content_type(self.content_type)
        self.is_json = self.media_type == JSON_CONTENT_TYPE

    @property
    def incarnation(self) -> str:
        return incarnation(self.uid, self.created_ms)

    @property
    def earliest_retained(self) -> int:
        """This stream's own retention point: a snapshot replaced everything before it, and a
        retention policy let go of everything below its point.

        (A fork also inherits its source's retention below the fork point: see
        ``Engine.earliest_readable``.)"""
        return max(self.snapshot_seq or 0, self.base_seq, self.retention.visible_seq if self.retention else 0)

    @property
    def retained_bytes(self) -> int:
        """Bytes of the messages from the retention policy's point to the tail (of all, without one)."""
        return self.bytes_total - (self.retention.dropped_bytes if self.retention else 0)

    # -- lifetime ---------------------------------------------------------------------

    def expired(self, now_ms: int) -> bool:
        return expiry_passed(self.expires_at_ms, self.ttl_s, self.last_access_ms, now_ms)

    def remaining_ttl_s(self, now_ms: int) -> int | None:
        if self.ttl_s is None:
            return None
        return max(0, (self.last_access_ms + self.ttl_s * 1000 - now_ms + 999) // 1000)

    # -- the in-memory tail -----------------------------------------------------------

    def remember(self, first_seq: int, messages: Sequence[bytes], ts_ms: int) -> None:
        if not self.mem:
            self.mem_base = first_seq
        if len(messages) > 1 and type(messages) is not MessageBatch:  # (a bulk append's are one each)
            self.batches[first_seq] = len(messages)
        added = self.mem.add(first_seq, messages, ts_ms)
        self.mem_bytes += added
        self.bytes_total += added

    def mark_flushed(self, tail: int) -> None:
        """Messages below ``tail`` are in Delta now."""
        if tail <= self.flushed_tail:
            return
        first = max(self.flushed_tail, self.mem_base)
        self.flushed_mem_bytes += self.mem.bytes_between(first, tail)
        self.flushed_tail = tail

    def trim_flushed(self, keep_bytes: int) -> None:
        """Forget flushed messages beyond the newest ``keep_bytes``; unflushed ones stay."""
        limit = self.flushed_tail - self.mem_base
        excess = self.mem_bytes - keep_bytes
        if limit <= 0 or excess <= 0:
            return
        if excess >= self.flushed_mem_bytes:  # every flushed message goes (a stream going to sleep)
            drop, dropped = limit, self.flushed_mem_bytes
        else:  # the fewest oldest messages whose bytes reach the excess
            cumulative = np.cumsum(self.mem.sizes(self.mem_base, self.flushed_tail))
            drop = min(int(np.searchsorted(cumulative, excess, side="left")) + 1, limit)
            dropped = int(cumulative[drop - 1])
        self.mem.drop(drop)
        self.mem_base += drop
        self.mem_bytes -= dropped
        self.flushed_mem_bytes -= dropped
        for seq in [seq for seq in self.batches if seq < self.mem_base]:
            del self.batches[seq]

    def wake(self) -> None:
        """Visible data changed: each waiter's ``at_wake`` runs now (a long-poll answered from
        here, ``StreamHandlers.read``), then its task is resumed (a turn of the loop later). The
        wake comes from the group commit's completion: what fails in an ``at_wake`` is logged,
        and its reader's task answers as usual."""
        waiters, self.waiters = self.waiters, {}
        for waiter, at_wake in waiters.items():
            if waiter.done():
                continue
            if at_wake is not None:
                try:
                    at_wake()
                except Exception:
                    log.exception("answering a woken reader failed; its task answers")
            waiter.set_result(None)

    # -- persistence ------------------------------------------------------------------

    def to_state(self, *, written_ms: int, deleted: bool = False) -> dict[str, Any]:
        """The state a ``state`` row stores and a sleeping stream keeps (``stream_index``):
        every field ``from_state`` reads, but those at their defaults left out (``None``,
        ``False``, an empty map, the zero counters). A new stream's row is ~200 bytes of JSON
        rather than ~550, which a million streams pay on disk, at recovery and asleep."""
        state: dict[str, Any] = {
            "name": self.name,
            "uid": self.uid,
            "content_type": self.content_type,
            "created_ms": self.created_ms,
            "tail": self.tail,
            "written_ms": written_ms,
        }
        for key in _NONE_BY_DEFAULT:  # (a loop of getattr: twice as fast as a dict of all, filtered)
            value = getattr(self, key)
            if value is not None and value is not False:
                state[key] = value
        for key in _ZERO_BY_DEFAULT:
            value = getattr(self, key)
            if value:
                state[key] = value
        if self.closed_by:
            state["closed_by"] = list(self.closed_by)
        if self.producers:
            state["producers"] = {pid: [p.epoch, p.last_seq] for pid, p in self.producers.items()}
        if self.retention is not None:
            state["retention"] = self.retention.to_json()
        if deleted:
            state["deleted"] = True
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Stream:
        stream = cls(
            name=state["name"],
            uid=state["uid"],
            content_type=state["content_type"],
            created_ms=state["created_ms"],
            tail=state["tail"],
        )
        for key in state.keys() & _OPTIONAL:  # (only those present: a new stream's state has three)
            value = state[key]
            if key == "closed_by":
                stream.closed_by = (value[0], value[1], value[2]) if value else None
            elif key == "producers":
                stream.producers = {pid: ProducerState(epoch, seq) for pid, (epoch, seq) in value.items()}
            elif key == "retention":
                stream.retention = RetentionState.from_json(value) if value else None
            else:
                setattr(stream, key, value)
        stream.visible_tail = stream.tail
        stream.visible_closed = stream.closed
        stream.mem_base = stream.tail
        stream.flushed_tail = stream.tail
        return stream
