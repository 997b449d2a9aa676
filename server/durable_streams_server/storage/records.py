"""Records: the unit of durability, and their byte encoding in the write-ahead log.

Every change to the server's state is one record, and a record carries everything a
change touches: the messages an append adds *and* the producer state, ``Stream-Seq``
and closure it moves. Writing one record is therefore atomic for data and state, which
is what makes idempotent producers exactly-once across crashes. Replaying the records
after the last Delta commit, in LSN order, rebuilds exactly the acknowledged state.

Frame layout (little-endian)::

    u32 payload_length | u32 crc32(payload) | payload
    payload := u64 lsn | u8 kind | u64 uid | u32 header_length | header (JSON)
               | u32 message_count | (u32 length | bytes) * message_count
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class RecordKind(IntEnum):
    CREATE = 1
    APPEND = 2
    DELETE = 3
    SNAPSHOT = 4
    BUCKET_CREATE = 5
    BUCKET_DELETE = 6


@dataclass(frozen=True, slots=True)
class Record:
    """One durable state change of one stream.

    ``header`` holds the kind-specific fields (see ``engine.replay``); ``messages`` the
    payloads an append or create adds, starting at sequence ``header["first_seq"]``.
    """

    lsn: int
    kind: RecordKind
    uid: int
    header: dict[str, Any]
    messages: tuple[bytes, ...] = field(default=())

    def encoded_size(self) -> int:
        return sum(len(m) for m in self.messages)


_FRAME = struct.Struct("<II")
_PREFIX = struct.Struct("<QBQI")
_U32 = struct.Struct("<I")


def encode(record: Record) -> bytes:
    header = json.dumps(record.header, separators=(",", ":")).encode()
    parts = [_PREFIX.pack(record.lsn, record.kind, record.uid, len(header)), header, _U32.pack(len(record.messages))]
    for message in record.messages:
        parts.append(_U32.pack(len(message)))
        parts.append(message)
    payload = b"".join(parts)
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def _decode_payload(payload: memoryview) -> Record:
    lsn, kind, uid, header_length = _PREFIX.unpack_from(payload, 0)
    position = _PREFIX.size
    header = json.loads(bytes(payload[position : position + header_length]))
    position += header_length
    (count,) = _U32.unpack_from(payload, position)
    position += _U32.size
    messages = []
    for _ in range(count):
        (length,) = _U32.unpack_from(payload, position)
        position += _U32.size
        messages.append(bytes(payload[position : position + length]))
        position += length
    return Record(lsn, RecordKind(kind), uid, header, tuple(messages))


def decode_frames(data: bytes) -> Iterator[tuple[Record, int]]:
    """Yield ``(record, end_position)`` for each intact frame; stop at the first torn one.

    A torn or corrupt frame can only be the last one a crash interrupted: it was never
    acknowledged (acknowledgement follows fsync), so stopping there loses nothing.
    """
    view = memoryview(data)
    position = 0
    while position + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(view, position)
        start = position + _FRAME.size
        end = start + length
        if end > len(data) or zlib.crc32(view[start:end]) != crc:
            return
        yield _decode_payload(view[start:end]), end
        position = end
