"""The engine's requests and outcomes: typed values the HTTP layer builds and renders."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import pyarrow as pa

from ..protocol.headers import ProducerHeaders
from ..protocol.offsets import Offset
from .stream import Stream


@dataclass(frozen=True, slots=True)
class CreateRequest:
    name: str
    content_type: str | None
    ttl_s: int | None
    expires_at: str | None
    expires_at_ms: int | None
    closed: bool
    body: bytes
    fork_from: str | None = None
    fork_offset: Offset | None = None
    fork_sub_offset: int | None = None
    retention: Mapping[str, int | None] = field(default_factory=dict)
    """The retention limits the request names (``protocol.retention.parse_changes``)."""


@dataclass(frozen=True, slots=True)
class CreateOutcome:
    created: bool
    stream: Stream
    tail: int


@dataclass(frozen=True, slots=True)
class AppendRequest:
    body: bytes
    content_type: str | None
    producer: ProducerHeaders | None
    stream_seq: str | None
    close: bool
    batch: pa.BinaryArray | None = None
    """A bulk append's messages (checked by ``protocol.bulk``; ``body`` is then empty and
    ``content_type`` the one the request names for its messages)."""
    if_match: str | None = None
    """A conditional append's ``If-Match`` as sent (``protocol.preconditions``: the engine parses it
    in its evaluation order)."""


class AppendResult(Enum):
    """What became of an append (the HTTP layer picks the status from it)."""

    STORED = "stored"
    """A plain write or a close was stored."""
    STORED_FOR_PRODUCER = "stored_for_producer"
    """An idempotent producer's messages were stored (the protocol answers 200)."""
    DUPLICATE = "duplicate"
    """An idempotent producer's retry of a write already stored: nothing changed."""
    ALREADY_CLOSED = "already_closed"
    """A repeated close of a closed stream: nothing changed."""


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What an append did, and the state to report back."""

    result: AppendResult
    tail: int
    closed: bool
    producer_epoch: int | None = None
    producer_seq: int | None = None
    include_offset: bool = True


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A contiguous slice of a stream, as a reader sees it."""

    stream: Stream
    start: Offset
    next: Offset
    chunks: list[bytes]
    stamps: list[int]
    """Append time (ms) of each chunk's message."""
    up_to_date: bool
    closed: bool


class VisibleStream(Protocol):
    """What hooks learn of a stream whose new tail is durable: a built ``Stream``, or the
    ``cold_tails.ColdTail`` of a stream appended to asleep (``cold_appends``)."""

    @property
    def name(self) -> str: ...

    @property
    def created_ms(self) -> int: ...

    @property
    def visible_tail(self) -> int: ...


class StreamHooks(Protocol):
    """Told about stream changes (the subscriptions use this): ``on_visible`` once a
    stream's new tail is durable (the engine), ``on_removed`` when a stream is deleted or
    soft-deleted (its transition; live requests only, recovery runs before hooks attach)."""

    def on_visible(self, stream: VisibleStream) -> None: ...

    def on_removed(self, stream: Stream) -> None: ...
