"""Fork and re-create rules: what a fork inherits, where it starts, when a PUT repeats one.

Pure decisions over stream state (no I/O); the engine applies them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ..protocol.errors import BadRequest, Gone
from ..protocol.headers import DEFAULT_CONTENT_TYPE, is_json, normalize_content_type
from .stream import Stream
from .types import CreateRequest


class ForkSource(Protocol):
    """What a fork inherits from its source: a local ``Stream``, or a copied fork's source
    in another shard (``copied_forks``)."""

    @property
    def name(self) -> str: ...
    @property
    def content_type(self) -> str: ...
    @property
    def ttl_s(self) -> int | None: ...
    @property
    def expires_at(self) -> str | None: ...
    @property
    def expires_at_ms(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class RecordedSource:
    """A copied fork's source as a repeated PUT compares against it: its path, and the
    configuration the fork resolved from it at creation (``copied_forks``), without asking the
    source's shard again. So a PUT without a TTL compares equal to a fork created with an
    explicit one (a local fork compares its source's, which may differ): the one difference."""

    name: str
    content_type: str
    ttl_s: int | None
    expires_at: str | None
    expires_at_ms: int | None


def recorded_source(fork: Stream, by_uid: Mapping[int, Stream]) -> ForkSource | None:
    """What ``config_differences`` compares a repeated PUT of ``fork`` against."""
    if fork.fork_source is not None:
        return RecordedSource(fork.fork_source, fork.content_type, fork.ttl_s, fork.expires_at, fork.expires_at_ms)
    return by_uid.get(fork.fork_of) if fork.fork_of is not None else None


def effective_expiry(request: CreateRequest, source: ForkSource | None) -> tuple[int | None, str | None, int | None]:
    """A fork without its own TTL or expiry copies its source's (never capped by it)."""
    if request.ttl_s is not None or request.expires_at is not None or source is None:
        return request.ttl_s, request.expires_at, request.expires_at_ms
    if source.ttl_s is not None:
        return source.ttl_s, None, None
    return None, source.expires_at, source.expires_at_ms


def config_differences(stream: Stream, request: CreateRequest, source: ForkSource | None) -> list[str]:
    """What a repeated PUT asks for that ``stream`` was not created with (empty: the same). A
    fork compares the values it resolved at creation (inherited content type and expiry
    included) against ``source``, its fork source. Each entry names the setting, the stream's
    value and the one asked for. Retention limits are not
    compared: they are the stream's to change (``PATCH``), and a repeated ``PUT`` leaves them be."""
    requested_type = normalize_content_type(
        request.content_type or (source.content_type if source else DEFAULT_CONTENT_TYPE)
    )
    ttl_s, _, expires_at_ms = effective_expiry(request, source)
    fork_offset = request.fork_offset.encode() if request.fork_offset is not None else stream.fork_offset
    compared: list[tuple[str, object, object]] = [
        ("content type", stream.media_type, requested_type),
        ("Stream-TTL", stream.ttl_s, ttl_s),
        ("Stream-Expires-At (ms)", stream.expires_at_ms, expires_at_ms),
        ("closed", stream.closed, request.closed),
        ("forked from", source.name if source else None, request.fork_from),
        ("fork offset", stream.fork_offset, fork_offset),
        ("fork sub-offset", stream.fork_sub_offset, request.fork_sub_offset or 0),
    ]
    return [f"{name} is {have!r}, the request asks {asked!r}" for name, have, asked in compared if have != asked]


def resolve_fork_point(
    source: Stream, request: CreateRequest, sliced: tuple[bytes, int] | None, source_earliest: int
) -> tuple[int, bytes | None]:
    """The fork's first own sequence number, and the prefix message a sub-offset slices.

    ``sliced`` is the source's message at the fork offset with the length of the append
    batch it starts: a binary sub-offset keeps that many bytes of it (materialized as the
    fork's first own message); a JSON sub-offset keeps that many values of the batch
    (inherited as they are, so the fork point simply moves past them)."""
    offset = request.fork_offset
    if offset is None:
        fork_seq = source.visible_tail
    else:
        if offset.within != 0 or offset.seq > source.visible_tail:
            raise BadRequest(f"fork offset {offset} is not a message boundary of the source", code="INVALID_OFFSET")
        fork_seq = offset.seq
    if fork_seq < source_earliest:
        raise Gone(f"fork offset {offset} is older than the source's earliest retained offset", code="OFFSET_GONE")
    sub = request.fork_sub_offset or 0
    if sub == 0:
        return fork_seq, None
    if fork_seq >= source.visible_tail or sliced is None:
        raise BadRequest("Stream-Fork-Sub-Offset needs a message at the fork offset", code="INVALID_FORK_SUB_OFFSET")
    first, batch = sliced
    if is_json(source.content_type):
        if sub > batch:
            raise BadRequest(
                "Stream-Fork-Sub-Offset overshoots the batch at the fork offset", code="INVALID_FORK_SUB_OFFSET"
            )
        return fork_seq + sub, None
    if sub > len(first):
        raise BadRequest(
            "Stream-Fork-Sub-Offset overshoots the message at the fork offset", code="INVALID_FORK_SUB_OFFSET"
        )
    return fork_seq, first[:sub]
