"""WAL record encoding: round trips, and decoding stops cleanly at a torn or corrupt frame."""

from __future__ import annotations

import struct
import zlib

import pytest

from durable_streams_server.storage.records import Record, RecordKind, decode_frames, encode

RECORDS = [
    Record(1, RecordKind.CREATE, 10, {"path": "/a", "content_type": "application/json", "ttl": None}),
    Record(2, RecordKind.CREATE, 11, {"path": "/b", "first_seq": 0}, (b"[1]", b'{"x":"\xc3\xa9"}')),
    Record(3, RecordKind.APPEND, 11, {"first_seq": 2, "producer": ["p", 0, 4], "closed": False}, (b"\x00\xff\x00",)),
    Record(4, RecordKind.APPEND, 12, {"first_seq": 0}, (b"", b"", bytes(range(256)), b"")),
    Record(5, RecordKind.APPEND, 12, {"first_seq": 4, "closed": True}),
    Record(6, RecordKind.DELETE, 10, {}),
    Record(2**64 - 1, RecordKind.APPEND, 2**64 - 1, {"unicode": "日本 ☃"}, (b"x" * 100_000,)),
]


def _decode_all(data: bytes) -> list[tuple[Record, int]]:
    return list(decode_frames(data))


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: f"lsn{r.lsn}-{r.kind.name}-{len(r.messages)}msgs")
def test_round_trip(record: Record) -> None:
    frame = encode(record)
    ((decoded, end),) = _decode_all(frame)
    assert decoded == record
    assert decoded.kind is record.kind
    assert isinstance(decoded.kind, RecordKind)
    assert end == len(frame)


def test_every_kind_with_and_without_messages() -> None:
    for kind in RecordKind:
        for messages in [(), (b"",), (b"a", b"\x00\x01", b"")]:
            record = Record(7, kind, 3, {"k": kind.name}, messages)
            assert [r for r, _ in _decode_all(encode(record))] == [record]


def test_frame_layout() -> None:
    record = Record(9, RecordKind.APPEND, 5, {"a": 1}, (b"hi",))
    frame = encode(record)
    length, crc = struct.unpack_from("<II", frame)
    assert length == len(frame) - 8
    assert crc == zlib.crc32(frame[8:])
    assert struct.unpack_from("<QBQI", frame, 8) == (9, 2, 5, len(b'{"a":1}'))


def test_concatenated_frames_decode_in_order_with_end_positions() -> None:
    frames = [encode(r) for r in RECORDS]
    decoded = _decode_all(b"".join(frames))
    assert [r for r, _ in decoded] == RECORDS
    ends = [sum(len(f) for f in frames[: i + 1]) for i in range(len(frames))]
    assert [end for _, end in decoded] == ends


def test_empty_input_decodes_nothing() -> None:
    assert _decode_all(b"") == []


def test_encoded_size_counts_message_bytes() -> None:
    assert RECORDS[3].encoded_size() == 256
    assert RECORDS[0].encoded_size() == 0


def test_torn_last_frame_at_every_position() -> None:
    head = [encode(r) for r in RECORDS[:3]]
    prefix = b"".join(head)
    last = encode(RECORDS[3])
    for cut in range(len(last)):
        decoded = _decode_all(prefix + last[:cut])
        assert [r for r, _ in decoded] == RECORDS[:3], cut
        assert decoded[-1][1] == len(prefix)


def test_torn_single_frame_yields_nothing() -> None:
    frame = encode(RECORDS[1])
    for cut in range(len(frame)):
        assert _decode_all(frame[:cut]) == []


def test_corrupted_byte_stops_decoding() -> None:
    good = encode(RECORDS[0])
    victim = encode(RECORDS[2])
    tail = encode(RECORDS[5])
    for position in range(len(victim)):
        for flip in (0x01, 0x80, 0xFF):
            corrupted = bytearray(victim)
            corrupted[position] ^= flip
            decoded = _decode_all(good + bytes(corrupted) + tail)
            assert [r for r, _ in decoded] == [RECORDS[0]], (position, flip)
            assert decoded[0][1] == len(good)


def test_crc_mismatch_in_payload_is_detected() -> None:
    frame = bytearray(encode(RECORDS[1]))
    frame[-1] ^= 0x10  # last message byte; length field still matches
    assert _decode_all(bytes(frame)) == []
