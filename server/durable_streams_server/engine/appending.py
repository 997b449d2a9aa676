"""Whether an append to a built stream is taken, and what it records.

Pure, like ``creation``: ``admit_append`` checks the request against the stream's *applied*
state in the protocol's order (closure, the ``If-Match`` header's form, the content type, the
producer's epoch and sequence, ``Stream-Seq``, then the condition itself) and answers with
what the engine records, or with the outcome that needs no record (a repeated close, a
producer's duplicate). The engine calls it in the synchronous step that also submits and
applies the record, so the state it was checked against is the state the record follows.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol import preconditions, producers
from ..protocol.errors import Conflict
from ..protocol.headers import normalize_content_type
from ..protocol.json_mode import split_messages
from ..protocol.offsets import encode_seq
from ..protocol.producers import ProducerState
from ..storage.message_batch import MessageBatch
from .stream import Stream
from .types import AppendOutcome, AppendRequest, AppendResult


@dataclass(frozen=True, slots=True)
class Admitted:
    """An append to record: its messages, and its producer's state after it (``None``: no producer)."""

    messages: tuple[bytes, ...] | MessageBatch
    producer: ProducerState | None


def admit_append(stream: Stream, request: AppendRequest) -> Admitted | AppendOutcome:
    """What appending ``request`` to ``stream`` records, or the outcome answered without a
    record; raises the protocol's ``Conflict``s (closed, content type, sequence, condition)
    and ``BadRequest``s (the condition's form, a JSON body that is not JSON)."""
    producer = request.producer
    has_data = bool(request.body) or request.batch is not None
    if stream.closed:
        if producer is not None and stream.closed_by == (producer.producer_id, producer.epoch, producer.seq):
            return AppendOutcome(AppendResult.ALREADY_CLOSED, stream.tail, True, producer.epoch, producer.seq)
        if not has_data and producer is None:
            return AppendOutcome(AppendResult.ALREADY_CLOSED, stream.tail, True)
        raise Conflict("stream is closed", code="STREAM_CLOSED", headers=closed_headers(stream))
    condition = request.if_match  # (a conditional append: ``preconditions`` has the order of its checks)
    expected = None if condition is None else preconditions.parse(condition, producer=producer is not None)
    if (
        has_data
        and request.content_type is not None
        and normalize_content_type(request.content_type) != stream.media_type
    ):
        raise Conflict(
            f"content type {request.content_type!r} does not match the stream's {stream.content_type!r}",
            code="CONTENT_TYPE_MISMATCH",
        )
    producer_state = None
    if producer is not None:
        decision = producers.admit(stream.producers.get(producer.producer_id), producer)
        if isinstance(decision, producers.Duplicate):
            return AppendOutcome(
                AppendResult.DUPLICATE, stream.tail, False, producer.epoch, decision.last_seq, include_offset=False
            )
        producer_state = decision
    if (
        request.stream_seq is not None
        and stream.stream_seq is not None
        and request.stream_seq.encode() <= stream.stream_seq.encode()
    ):
        raise Conflict("Stream-Seq must increase", code="SEQUENCE_REGRESSION")
    if expected is not None:
        preconditions.check(expected, stream.tail)  # (compared and written in one step: no await between)
    messages: tuple[bytes, ...] | MessageBatch = ()
    if request.batch is not None:
        messages = MessageBatch(request.batch)
    elif request.body:
        messages = tuple(split_messages(request.body, allow_empty_array=False)) if stream.is_json else (request.body,)
    return Admitted(messages, producer_state)


def closed_headers(stream: Stream) -> dict[str, str]:
    """The headers of an append refused because ``stream`` is closed."""
    return {"Stream-Closed": "true", "Stream-Next-Offset": encode_seq(stream.tail)}
