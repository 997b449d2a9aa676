"""Records: the unit of durability, one typed header per kind, and their WAL byte encoding.

Every change to the server's state is one record, and a record carries everything a
change touches: the messages an append adds *and* the producer state, ``Stream-Seq``
and closure it moves. Writing one record is therefore atomic for data and state, which
is what makes idempotent producers exactly-once across crashes. Replaying the records
after the last Delta commit, in LSN order, through the engine's transitions
(``engine.transitions``) rebuilds exactly the acknowledged state.

Each kind has a frozen header dataclass (``CreateHeader`` ... ``SigningKeysHeader``);
the record's kind is its header's type, so the two can never disagree. A header encodes
to (and decodes from) a JSON object whose keys are its field names in field order: the
bytes the untyped headers of earlier versions wrote, so their WAL files stay readable.

Frame layout (little-endian)::

    u32 payload_length | u32 crc32(payload) | payload
    payload := u64 lsn | u8 kind | u64 uid | u32 header_length | header (JSON)
               | u32 message_count | (u32 length | bytes) * message_count
    (a bulk append, ``message_batch``: message_count is 0xFFFFFFFF, then
               | u32 count | u32 offset * (count + 1) | values)
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar, Generic, TypeGuard, TypeVar

import orjson

from .message_batch import MessageBatch

_R = TypeVar("_R", bound="_Removal")


class RecordKind(IntEnum):
    CREATE = 1
    APPEND = 2
    DELETE = 3
    SNAPSHOT = 4
    BUCKET_CREATE = 5
    BUCKET_DELETE = 6
    SUBSCRIPTION = 7
    SIGNING_KEYS = 8
    RETENTION = 9


@dataclass(frozen=True, slots=True)
class CreateHeader:
    """A stream's creation (or a fork's): its configuration and initial messages, which
    start at ``first_seq`` (the fork point) in append batches of ``batches`` lengths."""

    KIND: ClassVar[RecordKind] = RecordKind.CREATE
    name: str
    content_type: str
    ttl_s: int | None
    expires_at: str | None
    expires_at_ms: int | None
    closed: bool
    fork_of: int | None
    fork_seq: int
    fork_offset: str | None
    fork_sub_offset: int
    first_seq: int
    batches: tuple[int, ...]
    ts: int
    fork_source: str | None = None
    """A copied fork's source (its path in another shard: ``engine.copied_forks``)."""
    fork_link: str | None = None
    """The id of a copied fork's link, registered at its source's shard."""
    retention: Mapping[str, int] | None = None
    """The stream's retention policy (``protocol.retention.RetentionPolicy`` as JSON), if any."""

    def to_json(self) -> dict[str, Any]:
        copied = {"fork_source": self.fork_source, "fork_link": self.fork_link} if self.fork_source else {}
        retention = {"retention": self.retention} if self.retention else {}
        return {
            **copied,
            **retention,
            "name": self.name,
            "content_type": self.content_type,
            "ttl_s": self.ttl_s,
            "expires_at": self.expires_at,
            "expires_at_ms": self.expires_at_ms,
            "closed": self.closed,
            "fork_of": self.fork_of,
            "fork_seq": self.fork_seq,
            "fork_offset": self.fork_offset,
            "fork_sub_offset": self.fork_sub_offset,
            "first_seq": self.first_seq,
            "batches": list(self.batches),
            "ts": self.ts,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CreateHeader:
        return cls(
            name=data["name"],
            content_type=data["content_type"],
            ttl_s=data["ttl_s"],
            expires_at=data["expires_at"],
            expires_at_ms=data["expires_at_ms"],
            closed=data["closed"],
            fork_of=data["fork_of"],
            fork_seq=data["fork_seq"],
            fork_offset=data["fork_offset"],
            fork_sub_offset=data["fork_sub_offset"],
            first_seq=data["first_seq"],
            batches=tuple(data["batches"]),
            ts=data["ts"],
            fork_source=data.get("fork_source"),
            fork_link=data.get("fork_link"),
            retention=data.get("retention"),
        )


@dataclass(frozen=True, slots=True)
class AppendHeader:
    """Messages from ``first_seq`` (one append batch), and the state they move: the
    producer's ``(id, epoch, last_seq)``, ``Stream-Seq``, closure."""

    KIND: ClassVar[RecordKind] = RecordKind.APPEND
    first_seq: int
    ts: int
    producer: tuple[str, int, int] | None
    stream_seq: str | None
    close: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "first_seq": self.first_seq,
            "ts": self.ts,
            "producer": list(self.producer) if self.producer is not None else None,
            "stream_seq": self.stream_seq,
            "close": self.close,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AppendHeader:
        producer = data["producer"]
        return cls(
            first_seq=data["first_seq"],
            ts=data["ts"],
            producer=(producer[0], producer[1], producer[2]) if producer is not None else None,
            stream_seq=data["stream_seq"],
            close=data["close"],
        )


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """A snapshot of the stream at offset ``seq``; its blob is the record's one message."""

    KIND: ClassVar[RecordKind] = RecordKind.SNAPSHOT
    seq: int
    content_type: str
    ts: int

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "content_type": self.content_type, "ts": self.ts}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotHeader:
        return cls(seq=data["seq"], content_type=data["content_type"], ts=data["ts"])


@dataclass(frozen=True, slots=True)
class RetentionHeader:
    """A stream's retention moved (``engine.retention``): its policy changed to ``policy``
    (``protocol.retention.RetentionPolicy`` as JSON), and/or its retention point advanced to
    ``seq``, below which its messages (``dropped_bytes`` bytes in all, from the stream's
    start) are gone."""

    KIND: ClassVar[RecordKind] = RecordKind.RETENTION
    policy: Mapping[str, int] | None
    seq: int | None
    dropped_bytes: int
    ts: int

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "seq": self.seq, "dropped_bytes": self.dropped_bytes, "ts": self.ts}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetentionHeader:
        return cls(policy=data["policy"], seq=data["seq"], dropped_bytes=data["dropped_bytes"], ts=data["ts"])


@dataclass(frozen=True, slots=True)
class _Removal:
    """A removal carries nothing but its time (the uid says what goes)."""

    ts: int

    def to_json(self) -> dict[str, Any]:
        return {"ts": self.ts}

    @classmethod
    def from_json(cls: type[_R], data: dict[str, Any]) -> _R:
        return cls(ts=data["ts"])


@dataclass(frozen=True, slots=True)
class DeleteHeader(_Removal):
    KIND: ClassVar[RecordKind] = RecordKind.DELETE


@dataclass(frozen=True, slots=True)
class BucketCreateHeader:
    KIND: ClassVar[RecordKind] = RecordKind.BUCKET_CREATE
    bucket_id: str
    ts: int
    retention: Mapping[str, int | None] | None = None
    """The retention limits the bucket's new streams get unless they name their own
    (``protocol.retention.resolve``: ``None`` is an explicit no-limit)."""

    def to_json(self) -> dict[str, Any]:
        retention = {"retention": self.retention} if self.retention else {}
        return {"bucket_id": self.bucket_id, "ts": self.ts, **retention}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BucketCreateHeader:
        return cls(bucket_id=data["bucket_id"], ts=data["ts"], retention=data.get("retention"))


@dataclass(frozen=True, slots=True)
class BucketDeleteHeader(_Removal):
    KIND: ClassVar[RecordKind] = RecordKind.BUCKET_DELETE


# -- subscriptions (engine/subscriptions.py) ------------------------------------------


@dataclass(frozen=True, slots=True)
class SubscriptionHeader:
    """A subscription's whole state after a change (configuration, links and acked
    offsets, generation, the wake in flight with its lease and retry schedule: the JSON of
    ``engine.subscription_state.Subscription``), or its deletion (``state`` is ``None``).
    The record's uid is the subscription's incarnation (the LSN of its first record);
    ``name`` is its reserved key, ``<root>__ds/subscriptions/<id>``, never a stream's."""

    KIND: ClassVar[RecordKind] = RecordKind.SUBSCRIPTION
    name: str
    state: Mapping[str, Any] | None
    ts: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "ts": self.ts}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubscriptionHeader:
        return cls(name=data["name"], state=data["state"], ts=data["ts"])


SIGNING_KEYS_UID = 0
"""The uid of the signing keys' records (no LSN is 0, so no stream or subscription has it)."""
SIGNING_KEYS_NAME = "__ds/signing-keys"


@dataclass(frozen=True, slots=True)
class SigningKeysHeader:
    """The webhook signing keys and the token key (``engine.signing.KeyRing`` as JSON)."""

    KIND: ClassVar[RecordKind] = RecordKind.SIGNING_KEYS
    keys: Mapping[str, Any]
    ts: int

    def to_json(self) -> dict[str, Any]:
        return {"keys": self.keys, "ts": self.ts}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SigningKeysHeader:
        return cls(keys=data["keys"], ts=data["ts"])


Header = (
    CreateHeader
    | AppendHeader
    | SnapshotHeader
    | RetentionHeader
    | DeleteHeader
    | BucketCreateHeader
    | BucketDeleteHeader
    | SubscriptionHeader
    | SigningKeysHeader
)
H = TypeVar("H", bound=Header)
H_co = TypeVar("H_co", bound=Header, covariant=True)

_DECODERS: dict[RecordKind, Callable[[dict[str, Any]], Header]] = {
    header.KIND: header.from_json
    for header in (
        CreateHeader,
        AppendHeader,
        SnapshotHeader,
        RetentionHeader,
        DeleteHeader,
        BucketCreateHeader,
        BucketDeleteHeader,
        SubscriptionHeader,
        SigningKeysHeader,
    )
}


@dataclass(frozen=True, slots=True)
class Record(Generic[H_co]):
    """One durable state change of one stream (or bucket), identified by ``uid``.

    ``messages`` are the payloads a create or append adds (from ``header.first_seq``) or a
    snapshot's blob. (Build one as ``Record(...)``, never ``Record[X](...)``: a frozen
    slotted generic cannot take the alias's ``__orig_class__``.)
    """

    lsn: int
    uid: int
    header: H_co
    messages: tuple[bytes, ...] | MessageBatch = field(default=())

    @property
    def kind(self) -> RecordKind:
        return self.header.KIND

    def encoded_size(self) -> int:
        if type(self.messages) is MessageBatch:
            return self.messages.nbytes
        return sum(len(m) for m in self.messages)


def is_kind(record: Record[Header], kind: type[H]) -> TypeGuard[Record[H]]:
    """Whether ``record`` carries a header of type ``kind`` (narrows it for mypy)."""
    return isinstance(record.header, kind)


_FRAME = struct.Struct("<II")
_PREFIX = struct.Struct("<QBQI")
_U32 = struct.Struct("<I")
_BULK = 0xFFFFFFFF


def encode(record: Record[Header]) -> bytes:
    header = orjson.dumps(record.header.to_json(), option=orjson.OPT_NON_STR_KEYS)  # (compact, as json's)
    parts: list[bytes | memoryview] = [_PREFIX.pack(record.lsn, record.kind, record.uid, len(header)), header]
    messages = record.messages
    if type(messages) is MessageBatch:
        parts.append(_U32.pack(_BULK) + _U32.pack(len(messages)))
        parts.extend(messages.frame_parts())
    else:
        parts.append(_U32.pack(len(messages)))
        for message in messages:
            parts.append(_U32.pack(len(message)))
            parts.append(message)
    length, crc = 0, 0
    for part in parts:  # the CRC over the parts, so the payload is copied once, into the frame
        length += len(part)
        crc = zlib.crc32(part, crc)
    return b"".join([_FRAME.pack(length, crc), *parts])


def _decode_payload(payload: memoryview) -> Record[Header]:
    lsn, kind, uid, header_length = _PREFIX.unpack_from(payload, 0)
    position = _PREFIX.size
    header = _DECODERS[RecordKind(kind)](orjson.loads(payload[position : position + header_length]))
    position += header_length
    (count,) = _U32.unpack_from(payload, position)
    position += _U32.size
    if count == _BULK:
        (count,) = _U32.unpack_from(payload, position)
        position += _U32.size
        offsets_end = position + 4 * (count + 1)
        (size,) = _U32.unpack_from(payload, offsets_end - 4)
        batch = MessageBatch.from_frame(count, payload[position:offsets_end], payload[offsets_end : offsets_end + size])
        return Record(lsn, uid, header, batch)
    messages = []
    for _ in range(count):
        (length,) = _U32.unpack_from(payload, position)
        position += _U32.size
        messages.append(bytes(payload[position : position + length]))
        position += length
    return Record(lsn, uid, header, tuple(messages))


def decode_frames(data: bytes) -> Iterator[tuple[Record[Header], int]]:
    """Yield ``(record, end_position)`` for each intact frame; stop at the first torn one.

    A torn or corrupt frame can only be the last one a crash interrupted: it was never
    acknowledged (acknowledgement follows fsync), so stopping there loses nothing. The
    zeros after a segment's last frame (``wal``: preallocation) stop it the same way.
    """
    view = memoryview(data)
    position = 0
    while position + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(view, position)
        start = position + _FRAME.size
        end = start + length
        if length < _PREFIX.size or end > len(data) or zlib.crc32(view[start:end]) != crc:
            return  # (zeros, the preallocated part of a segment, end it too: no payload is empty)
        yield _decode_payload(view[start:end]), end
        position = end
