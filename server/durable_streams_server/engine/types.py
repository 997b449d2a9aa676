"""The engine's requests and outcomes: typed values the HTTP layer builds and renders."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

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


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What an append did. ``status`` is 200 (producer write), 204 (plain write,
    close, or duplicate)."""

    status: int
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


class StreamHooks(Protocol):
    """Told about stream changes once they are durable (the subscriptions use this)."""

    def on_visible(self, stream: Stream) -> None: ...

    def on_removed(self, stream: Stream) -> None: ...
