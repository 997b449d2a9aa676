"""WAL record encoding: round trips, frames written by earlier versions, and decoding
stops cleanly at a torn or corrupt frame."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from durable_streams_server.storage import records
from durable_streams_server.storage.records import Header, Record, RecordKind, decode_frames, encode


def _create(name: str, first_seq: int = 0, batches: tuple[int, ...] = ()) -> records.CreateHeader:
    return records.CreateHeader(
        name, "application/json", None, None, None, False, None, 0, None, 0, first_seq, batches, 1000
    )


RECORDS: list[Record[Header]] = [
    Record(1, 10, _create("v1/stream/a")),
    Record(2, 11, _create("b/é", batches=(2,)), (b"[1]", b'{"x":"\xc3\xa9"}')),
    Record(3, 11, records.AppendHeader(2, 1001, ("p", 0, 4), None, False), (b"\x00\xff\x00",)),
    Record(4, 12, records.AppendHeader(0, 1002, None, None, False), (b"", b"", bytes(range(256)), b"")),
    Record(5, 12, records.AppendHeader(4, 1003, None, None, True)),
    Record(6, 10, records.DeleteHeader(1004)),
    Record(
        7,
        10,
        records.CreateHeader(
            "v1/stream/r",
            "text/plain",
            None,
            None,
            None,
            False,
            None,
            0,
            None,
            0,
            0,
            (),
            1,
            retention={"max_messages": 5},
        ),
    ),
    Record(8, 7, records.SubscriptionHeader("b/__ds/subscriptions/s", {"root": "b/", "wake": None}, 1005)),
    Record(9, 7, records.SubscriptionHeader("b/__ds/subscriptions/s", None, 1006)),
    Record(10, records.SIGNING_KEYS_UID, records.SigningKeysHeader({"token_key": "é"}, 1007)),
    Record(2**64 - 1, 2**64 - 1, records.AppendHeader(0, 2**53, None, "日本 ☃", False), (b"x" * 100_000,)),
]
ONE_OF_EACH_KIND: list[Header] = [
    _create("v1/stream/k", 3, (1, 2)),
    records.AppendHeader(7, 5, ("producer", 2, 9), "0007", True),
    records.DeleteHeader(6),
    records.SnapshotHeader(4, "application/x-snap", 7),
    records.RetentionHeader({"max_bytes": 1024, "max_age_s": 60}, 12, 4096, 12),
    records.RetentionHeader(None, 40, 9000, 13),
    records.BucketCreateHeader("bucket", 8),
    records.BucketCreateHeader("limited", 8, {"max_messages": 10, "max_age_s": None}),
    records.BucketDeleteHeader(9),
    records.SubscriptionHeader(
        "v1/stream/__ds/subscriptions/s", {"generation": 3, "links": {"a": [True, False, 2]}}, 10
    ),
    records.SigningKeysHeader({"signing_keys": [], "token_key": "k"}, 11),
]


def _decode_all(data: bytes) -> list[tuple[Record[Header], int]]:
    return list(decode_frames(data))


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: f"lsn{r.lsn}-{r.kind.name}-{len(r.messages)}msgs")
def test_round_trip(record: Record[Header]) -> None:
    frame = encode(record)
    ((decoded, end),) = _decode_all(frame)
    assert decoded == record
    assert decoded.kind is record.kind
    assert isinstance(decoded.kind, RecordKind)
    assert end == len(frame)


def test_every_kind_with_and_without_messages() -> None:
    assert {header.KIND for header in ONE_OF_EACH_KIND} == set(RecordKind)
    for header in ONE_OF_EACH_KIND:
        for messages in [(), (b"",), (b"a", b"\x00\x01", b"")]:
            record = Record(7, 3, header, messages)
            assert [r for r, _ in _decode_all(encode(record))] == [record]


def test_frame_layout() -> None:
    header = records.AppendHeader(1, 2, None, None, False)
    record = Record(9, 5, header, (b"hi",))
    frame = encode(record)
    length, crc = struct.unpack_from("<II", frame)
    assert length == len(frame) - 8
    assert crc == zlib.crc32(frame[8:])
    header_json = b'{"first_seq":1,"ts":2,"producer":null,"stream_seq":null,"close":false}'
    assert struct.unpack_from("<QBQI", frame, 8) == (9, 2, 5, len(header_json))
    assert frame[8 + 21 : 8 + 21 + len(header_json)] == header_json


# Frames as the untyped-header versions wrote them: header dicts built by the engine, in its
# key order, JSON with compact separators. (kind, header JSON, messages, the typed record.)
OLD_LAYOUT: list[tuple[int, bytes, tuple[bytes, ...], Header]] = [
    (
        1,
        b'{"name":"v1/stream/f","content_type":"application/json","ttl_s":60,"expires_at":null,'
        b'"expires_at_ms":null,"closed":false,"fork_of":5,"fork_seq":2,"fork_offset":"0000000000000002_0000000000000000",'
        b'"fork_sub_offset":0,"first_seq":2,"batches":[1,2],"ts":1700000000000}',
        (b"[1]", b"2", b"3"),
        records.CreateHeader(
            "v1/stream/f",
            "application/json",
            60,
            None,
            None,
            False,
            5,
            2,
            "0000000000000002_0000000000000000",
            0,
            2,
            (1, 2),
            1700000000000,
        ),
    ),
    (
        2,
        b'{"first_seq":3,"ts":1700000000001,"producer":["writer-1",4,17],"stream_seq":"0009","close":true}',
        (b"x",),
        records.AppendHeader(3, 1700000000001, ("writer-1", 4, 17), "0009", True),
    ),
    (
        2,
        b'{"first_seq":0,"ts":1700000000002,"producer":null,"stream_seq":null,"close":false}',
        (b"a", b"b"),
        records.AppendHeader(0, 1700000000002, None, None, False),
    ),
    (3, b'{"ts":1700000000003}', (), records.DeleteHeader(1700000000003)),
    (
        4,
        b'{"seq":3,"content_type":"application/x-snap","ts":1700000000004}',
        (b"\x00blob",),
        records.SnapshotHeader(3, "application/x-snap", 1700000000004),
    ),
    (5, b'{"bucket_id":"b-1","ts":1700000000005}', (), records.BucketCreateHeader("b-1", 1700000000005)),
    (6, b'{"ts":1700000000006}', (), records.BucketDeleteHeader(1700000000006)),
]


def _old_frame(lsn: int, kind: int, uid: int, header: bytes, messages: tuple[bytes, ...]) -> bytes:
    """u32 payload_length | u32 crc32(payload) | payload, built by hand from the layout."""
    payload = struct.pack("<QBQI", lsn, kind, uid, len(header)) + header + struct.pack("<I", len(messages))
    for message in messages:
        payload += struct.pack("<I", len(message)) + message
    return struct.pack("<II", len(payload), zlib.crc32(payload)) + payload


@pytest.mark.parametrize("old", OLD_LAYOUT, ids=lambda old: f"{RecordKind(old[0]).name}-{len(old[2])}msgs")
def test_frames_of_the_untyped_layout_decode_to_typed_records(
    old: tuple[int, bytes, tuple[bytes, ...], Header],
) -> None:
    kind, header_json, messages, header = old
    assert json.loads(header_json) == header.to_json()
    frame = _old_frame(41, kind, 7, header_json, messages)
    ((decoded, end),) = _decode_all(frame)
    assert decoded == Record(41, 7, header, messages)
    assert decoded.kind is RecordKind(kind) and type(decoded.header) is type(header)
    assert end == len(frame)
    assert encode(decoded) == frame  # and the typed headers write the very same bytes


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


def test_bulk_append_record_round_trips_its_buffers() -> None:
    """A bulk append's record carries its messages as one offsets block and one values
    block; decoded, they are the same messages (also from a sliced array, whose offsets do
    not start at 0), and a torn bulk frame is cut off whole."""
    import pyarrow as pa

    from durable_streams_server.storage.message_batch import MessageBatch

    messages = [b"a", b"\r\n", b"\x00", b"--", bytes(range(256)), b"x" * 70_000]
    whole = pa.array([b"skip", *messages, b"after"], pa.binary())
    for array in (pa.array(messages, pa.binary()), whole.slice(1, len(messages))):
        record = Record(5, 9, records.AppendHeader(3, 1000, ("p", 1, 2), "s", True), MessageBatch(array))
        frame = encode(record)
        ((decoded, end),) = list(decode_frames(frame))
        assert end == len(frame)
        assert isinstance(decoded.messages, MessageBatch)
        assert decoded.messages.list() == messages
        assert decoded.header == record.header and decoded.encoded_size() == sum(map(len, messages))
        assert list(decode_frames(frame[:-1])) == []
