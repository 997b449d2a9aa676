"""A stream's persisted state (``engine.stream``): what ``to_state`` writes, ``from_state``
reads back field for field, from JSON as a state row or a sleeping stream keeps it."""

from __future__ import annotations

import dataclasses

import orjson

from durable_streams_server.engine.retention_state import RetentionState
from durable_streams_server.engine.stream import Stream
from durable_streams_server.protocol.producers import ProducerState
from durable_streams_server.protocol.retention import RetentionPolicy

_DERIVED = {"media_type", "is_json", "forks", "visible_tail", "visible_closed", "last_lsn", "mem_base", "mem"}
_DERIVED |= {"mem_bytes", "batches", "snapshot_data", "flushed_tail", "flushed_mem_bytes", "waiters"}


def _persisted(stream: Stream) -> dict[str, object]:
    return {f.name: getattr(stream, f.name) for f in dataclasses.fields(stream) if f.name not in _DERIVED}


def _round_trip(stream: Stream) -> Stream:
    return Stream.from_state(orjson.loads(orjson.dumps(stream.to_state(written_ms=5))))


def test_every_persisted_field_comes_back_as_it_was() -> None:
    stream = Stream(
        "a/b",
        7,
        "application/json; charset=utf-8",
        1_700_000_000_000,
        ttl_s=60,
        expires_at="2030-01-01T00:00:00Z",
        expires_at_ms=1_893_456_000_000,
        closed=True,
        closed_by=("p", 2, 9),
        tail=12,
        producers={"p": ProducerState(2, 9), "q": ProducerState(0, 3)},
        stream_seq="0042",
        fork_of=3,
        fork_seq=4,
        fork_offset="0000000000000004",
        fork_sub_offset=2,
        fork_source="elsewhere/src",
        fork_link="link-1",
        base_seq=1,
        soft_deleted=True,
        last_access_ms=1_700_000_000_500,
        last_write_ms=1_700_000_000_400,
        bytes_total=999,
        snapshot_seq=5,
        snapshot_content_type="application/json",
        snapshot_lsn=77,
        retention=RetentionState(RetentionPolicy.from_json({"max_messages": 10}), seq=2, dropped_bytes=40),
    )
    back = _round_trip(stream)
    assert back.retention is not None and stream.retention is not None
    assert back.retention.to_json() == stream.retention.to_json()
    assert {k: v for k, v in _persisted(back).items() if k != "retention"} == {
        k: v for k, v in _persisted(stream).items() if k != "retention"
    }
    assert (back.media_type, back.is_json) == ("application/json", True)
    assert (back.visible_tail, back.visible_closed, back.mem_base, back.flushed_tail) == (12, True, 12, 12)


def test_a_new_stream_writes_only_what_it_has_and_reads_back_its_defaults() -> None:
    stream = Stream("s", 1, "text/plain", 1_700_000_000_000, tail=3, last_access_ms=1_700_000_000_001)
    state = stream.to_state(written_ms=5)
    assert set(state) == {"name", "uid", "content_type", "created_ms", "tail", "written_ms", "last_access_ms"}
    back = _round_trip(stream)
    assert _persisted(back) == _persisted(stream)
    assert back.producers == {} and back.producers is not stream.producers


def test_unknown_keys_of_a_state_are_left_alone() -> None:
    state = Stream("s", 1, "text/plain", 1).to_state(written_ms=5, deleted=True) | {"type": "stream"}
    assert _persisted(Stream.from_state(state)) == _persisted(Stream("s", 1, "text/plain", 1))
