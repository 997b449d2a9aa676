"""What a create records: the new stream's ``CreateHeader`` and its first messages.

Pure, like ``forks``: the engine finds what the request names (a fork's source, a copied
fork's export, the bucket's retention, the clock) and submits what this returns. A new stream
takes its configuration from the request, and what the request leaves out from its origin (a
fork's source: its content type and expiry) or the defaults. Its first messages, each its
own append batch, are a copied fork's inherited ones, then a binary sub-offset's prefix; the
request's body is one batch after them (a JSON body split into its values).
"""

from __future__ import annotations

from ..protocol.errors import Conflict
from ..protocol.headers import DEFAULT_CONTENT_TYPE, is_json, normalize_content_type
from ..protocol.json_mode import split_messages
from ..protocol.retention import RetentionPolicy
from ..storage.records import CreateHeader
from . import forks
from .copied_forks import ForkCopy
from .stream import Stream
from .types import CreateRequest


def create_record(
    request: CreateRequest,
    *,
    source: Stream | None,
    copy: ForkCopy | None,
    sliced: tuple[bytes, int] | None,
    source_earliest: int,
    retention: RetentionPolicy,
    ts: int,
) -> tuple[CreateHeader, tuple[bytes, ...]]:
    """The record of creating ``request``'s stream: its header and messages.

    ``source``: a local fork's source (its earliest readable seq ``source_earliest``, the message
    at the fork offset ``sliced``: ``Engine.fork_message``); ``copy``: a copied fork's export
    (``copied_forks``); neither for an ordinary stream. Raises ``Conflict`` (content type other
    than the source's), ``BadRequest``/``Gone`` (the fork point) and ``BadRequest`` (a JSON body
    that is not JSON)."""
    origin: forks.ForkSource | None = copy.meta if copy is not None else source
    content_type = request.content_type or (origin.content_type if origin else DEFAULT_CONTENT_TYPE)
    if origin is not None and normalize_content_type(content_type) != normalize_content_type(origin.content_type):
        raise Conflict("a fork's content type must match its source's", code="CONTENT_TYPE_MISMATCH")
    ttl_s, expires_at, expires_at_ms = forks.effective_expiry(request, origin)
    fork_seq, prefix = (copy.meta.fork_seq, copy.prefix) if copy is not None else (0, None)
    if source is not None:
        fork_seq, prefix = forks.resolve_fork_point(source, request, sliced, source_earliest)
    messages = [*(copy.messages if copy is not None else ()), *(() if prefix is None else (prefix,))]
    batches = [1] * len(messages)
    if request.body:
        initial = split_messages(request.body, allow_empty_array=True) if is_json(content_type) else [request.body]
        if initial:
            messages.extend(initial)
            batches.append(len(initial))
    header = CreateHeader(
        name=request.name,
        content_type=content_type,
        ttl_s=ttl_s,
        expires_at=expires_at,
        expires_at_ms=expires_at_ms,
        closed=request.closed,
        fork_of=source.uid if source else None,
        fork_seq=fork_seq,
        fork_offset=request.fork_offset.encode() if request.fork_offset else None,
        fork_sub_offset=request.fork_sub_offset or 0,
        first_seq=copy.meta.first_seq if copy is not None else fork_seq,
        batches=tuple(batches),
        ts=ts,
        fork_source=copy.meta.name if copy is not None else None,
        fork_link=copy.link if copy is not None else None,
        retention=retention.to_json() if retention else None,  # (most creates: no policy to render)
    )
    return header, tuple(messages)
