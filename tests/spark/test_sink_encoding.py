"""Rows → messages → request bodies, without Spark: the cuts are a pure function of the
messages in order (exactly-once rests on it), and the payload rules of the sink."""

from __future__ import annotations

import datetime
import json
import math
import random

import pyarrow as pa
import pytest

from pyspark_durable_streams._sink.encoding import PayloadError, RequestCutter, checked_messages, row_messages
from pyspark_durable_streams.client import bulk

MAX_BYTES, MAX_MESSAGES = 300, 7


def _messages(count: int) -> list[bytes]:
    generator = random.Random(7)
    return [json.dumps("x" * generator.choice([0, 1, 5, 40, 120, 400])).encode() for _ in range(count)]


def _greedy(messages: list[bytes]) -> list[list[bytes]]:
    """The rule, one message at a time: a body takes the next message while the body stays
    within MAX_BYTES (a lone message may exceed it) and holds at most MAX_MESSAGES."""
    bodies: list[list[bytes]] = [[]]
    for message in messages:
        current = bodies[-1]
        size = 2 + sum(len(m) + 1 for m in current) + len(message) - (0 if current else 1)
        if current and (size > MAX_BYTES or len(current) == MAX_MESSAGES):
            bodies.append([])
        bodies[-1].append(message)
    return bodies


def _cut(messages: list[bytes], chunk: int) -> list[bytes]:
    cutter = RequestCutter("application/json", max_bytes=MAX_BYTES, max_messages=MAX_MESSAGES)
    bodies = []
    for at in range(0, len(messages), chunk):
        bodies += cutter.add(pa.array(messages[at : at + chunk], pa.binary()))
    return bodies + list(cutter.finish())


@pytest.mark.parametrize("chunk", [1, 3, 11, 1000])
def test_json_bodies_are_cut_greedily_whatever_the_batching(chunk: int) -> None:
    messages = _messages(200)
    bodies = _cut(messages, chunk)
    assert bodies == [b"[" + b",".join(body) + b"]" for body in _greedy(messages)]
    assert [item for body in bodies for item in json.loads(body)] == [json.loads(m) for m in messages]
    assert all(len(body) <= MAX_BYTES or len(json.loads(body)) == 1 for body in bodies)


@pytest.mark.parametrize("content_type", ["application/json", "application/octet-stream"])
@pytest.mark.parametrize("chunk", [1, 3, 11, 1000])
def test_bulk_bodies_are_cut_like_json_arrays_and_byte_identical_whatever_the_batching(
    content_type: str, chunk: int
) -> None:
    """With bulk appends every content type is cut by the same rule, and a body's bytes depend
    only on its messages (not on the Arrow buffers they came in): retries send the same bytes."""
    messages = _messages(200)
    cutter = RequestCutter(content_type, max_bytes=MAX_BYTES, max_messages=MAX_MESSAGES, bulk=True)
    bodies = []
    for at in range(0, len(messages), chunk):
        padded = pa.array([b"pad", *messages[at : at + chunk], b"pad"], pa.binary())
        bodies += cutter.add(padded.slice(1, len(messages[at : at + chunk])))
    bodies += cutter.finish()
    expected = _greedy(messages)
    assert [pa.ipc.open_stream(body).read_all()["data"].to_pylist() for body in bodies] == expected
    assert bodies == [bulk.body(body) for body in expected]


def test_byte_streams_send_each_message_alone() -> None:
    cutter = RequestCutter("application/octet-stream", max_bytes=MAX_BYTES, max_messages=MAX_MESSAGES)
    bodies = list(cutter.add(pa.array([b"a", b"\x00\xff", b"ccc"], pa.binary()))) + list(cutter.finish())
    assert bodies == [b"a", b"\x00\xff", b"ccc"]


def test_nulls_and_empty_messages() -> None:
    values = pa.array([b"1", None, b""], pa.binary())
    assert checked_messages(values, json_stream=True, url="u").to_pylist() == [b"1", b"null", b""]
    with pytest.raises(PayloadError, match="null 'value' for the byte stream u"):
        checked_messages(values, json_stream=False, url="u")
    with pytest.raises(PayloadError, match="empty 'value' for u"):
        checked_messages(pa.array([b"x", b""], pa.binary()), json_stream=False, url="u")


def test_value_column_bytes_are_taken_as_they_are() -> None:
    for values in (pa.array(['"é"', None], pa.string()), pa.array(['"é"', None], pa.large_string())):
        batch = pa.record_batch({"value": values, "other": pa.array([1, 2])})
        messages = checked_messages(
            row_messages(batch, value_column="value", json_columns=[]), json_stream=True, url="u"
        )
        assert messages.to_pylist() == ['"é"'.encode(), b"null"]
        cutter = RequestCutter("application/json", max_bytes=MAX_BYTES, max_messages=MAX_MESSAGES)
        assert [*cutter.add(messages), *cutter.add(pa.array([b"3"], pa.binary())), *cutter.finish()] == [
            '["é",null,3]'.encode()
        ]


def test_rows_become_json_objects_as_to_json_writes_them() -> None:
    plain = pa.record_batch(
        {"i": pa.array([1, None], pa.int32()), "s": pa.array(['a"é\n', None]), "b": pa.array([True, None])}
    )
    assert row_messages(plain, value_column=None, json_columns=["i", "s", "b"]).to_pylist() == [
        '{"i":1,"s":"a\\"é\\n","b":true}'.encode(),
        b"{}",
    ]
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    rich = pa.record_batch(
        {
            "f": pa.array([math.nan, 1.5]),
            "bin": pa.array([b"\x00\x01", None]),
            "ts": pa.array([when, when], pa.timestamp("us", tz="UTC")),
            "nested": pa.array([{"x": 1, "y": None}, None], pa.struct([("x", pa.int64()), ("y", pa.string())])),
            "m": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int64())),
        }
    )
    first, second = row_messages(rich, value_column=None, json_columns=rich.schema.names).to_pylist()
    assert json.loads(first) == {
        "f": "NaN",
        "bin": "AAE=",
        "ts": "2024-05-06T07:08:09+00:00",
        "nested": {"x": 1},
        "m": {"k": 1},
    }
    assert json.loads(second) == {"f": 1.5, "ts": "2024-05-06T07:08:09+00:00"}
