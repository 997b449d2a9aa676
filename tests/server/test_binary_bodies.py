"""Binary bodies (``engine.reads.read_body``): a plain read of a binary stream served from Delta
carries up to ``HISTORY_FACTOR`` times ``--max-read-bytes``, written from views of the decoded
Arrow buffers; reads from memory and reads of JSON streams keep the read budget.

Over real HTTP against a server on a real Delta table; the engine's views are checked against
the stored bytes on Arrow arrays of every shape a read hands them (sliced, chunked, empty)."""

from __future__ import annotations

import json
import random
from array import array
from collections.abc import Callable

import pyarrow as pa
from servers import ServerProcess, flushed, read_all, session, wait_for

from durable_streams_server.engine.reads import HISTORY_FACTOR
from durable_streams_server.engine.runs import ArrowRun, MemoryRun, StoredRun, binary_views, comma_joined
from durable_streams_server.protocol.offsets import Offset, parse_offset

OCTETS = {"Content-Type": "application/octet-stream"}
BUDGET = 64 * 1024
FLAGS = ("--max-read-bytes", str(BUDGET), "--flush-interval-ms", "50", "--compaction-interval-s", "0")


def _position(messages: list[bytes], offset: Offset) -> int:
    return sum(len(message) for message in messages[: offset.seq]) + offset.within


def test_a_catch_up_from_delta_carries_several_budgets_per_response(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """90 messages of 20 KB (1.8 MB) read back from Delta: responses of up to 8 budgets, each
    body exactly the stored bytes between its offsets; the same reads from memory keep one budget."""
    server = server_factory(*FLAGS)
    http = session()
    url = server.stream_url("catch-up")
    assert http.put(url, headers=OCTETS).status_code == 201
    rng = random.Random(11)
    messages = [rng.randbytes(20_000) for _ in range(90)]
    for index, message in enumerate(messages):
        assert http.post(url, headers=OCTETS, data=message).status_code == 204
        if index % 30 == 29:
            wait_for(flushed(server))
    stored = b"".join(messages)
    warm = http.get(url, params={"offset": "-1"})
    assert len(warm.content) <= BUDGET + 20_000  # (from memory: the read budget)

    server.restart()  # nothing in memory: every read goes to Delta
    offset, sizes = Offset(0), []
    while True:
        response = http.get(url, params={"offset": offset.encode()})
        assert response.status_code == 200
        end = parse_offset(response.headers["Stream-Next-Offset"])
        assert response.content == stored[_position(messages, offset) : _position(messages, end)]
        assert int(response.headers["Content-Length"]) == len(response.content)
        sizes.append(len(response.content))
        offset = end
        if response.headers.get("Stream-Up-To-Date") == "true":
            break
    assert offset == Offset(len(messages))
    assert max(sizes) > 4 * BUDGET  # (before: one budget, 4 messages, per response)
    assert all(size <= HISTORY_FACTOR * BUDGET + 20_000 for size in sizes)
    assert len(sizes) <= -(-len(stored) // (HISTORY_FACTOR * BUDGET - 20_000)) + 1


def test_a_message_larger_than_the_history_budget_is_sliced_from_views(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """A 1.2 MB message between small ones, read from Delta from inside it: slices of at most
    8 budgets, cut where the offsets say, then the rest of it with the messages after it."""
    server = server_factory(*FLAGS)
    http = session()
    url = server.stream_url("large")
    assert http.put(url, headers=OCTETS).status_code == 201
    rng = random.Random(12)
    messages = [rng.randbytes(300), rng.randbytes(1_200_000), rng.randbytes(500), rng.randbytes(700)]
    for message in messages:
        assert http.post(url, headers=OCTETS, data=message).status_code == 204
    wait_for(flushed(server))
    server.restart()
    stored = b"".join(messages)
    response = http.get(url, params={"offset": Offset(1, 1000).encode()})
    end = parse_offset(response.headers["Stream-Next-Offset"])
    assert end == Offset(1, 1000 + HISTORY_FACTOR * BUDGET)
    assert response.content == messages[1][1000 : 1000 + HISTORY_FACTOR * BUDGET]
    rest = b""
    while response.headers.get("Stream-Up-To-Date") != "true":
        response = http.get(url, params={"offset": response.headers["Stream-Next-Offset"]})
        assert len(response.content) <= HISTORY_FACTOR * BUDGET + 1200
        rest += response.content
    assert rest == stored[_position(messages, end) :]
    assert read_all(http, url) == stored


def test_json_streams_read_from_delta_keep_the_read_budget(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*FLAGS)
    http = session()
    url = server.stream_url("events")
    assert http.put(url, headers={"Content-Type": "application/json"}).status_code == 201
    events = [{"n": index, "pad": "x" * 2000} for index in range(100)]
    for event in events:
        assert http.post(url, headers={"Content-Type": "application/json"}, json=event).status_code == 204
    wait_for(flushed(server))
    server.restart()
    response = http.get(url, params={"offset": "-1"})
    got = response.json()
    assert got == events[: len(got)]
    assert 0 < len(json.dumps(got)) <= BUDGET + 2100  # (one budget: about 31 events, not 8 budgets)


def test_views_are_the_stored_bytes_end_to_end() -> None:
    """Sliced, chunked, empty-valued and non-binary arrays: the views join to the values."""
    rng = random.Random(13)
    values = [rng.randbytes(rng.choice([0, 1, 40, 3000])) for _ in range(200)]
    whole = pa.array(values, pa.binary())
    chunked = pa.chunked_array([whole.slice(0, 70), whole.slice(70, 1), whole.slice(71)])
    for data in (whole, whole.slice(13, 101), chunked, chunked.slice(50, 100), whole.slice(5, 0)):
        expected = b"".join(value for value in data.to_pylist())
        views = binary_views(data)
        assert b"".join(views) == expected
        assert all(isinstance(view, memoryview) for view in views)  # (no copy)
    large = pa.array(values, pa.large_binary()).slice(3, 50)
    assert b"".join(binary_views(large)) == b"".join(values[3:53])
    stored = pa.table({"seq": pa.array(range(200), pa.int64()), "data": whole})
    assert b"".join(StoredRun(stored.slice(20, 30)).views()) == b"".join(values[20:50])
    assert b"".join(ArrowRun(0, whole.slice(7, 9), 0).views()) == b"".join(values[7:16])


def test_joined_runs_are_the_messages_with_commas_between() -> None:
    """``Run.joined`` (a JSON read's array elements): sliced, chunked, view-typed and null-holding
    arrays, for every kind of run."""
    rng = random.Random(17)
    values = [json.dumps({"n": index, "pad": "y" * rng.choice([0, 40, 3000])}).encode() for index in range(200)]
    whole = pa.array(values, pa.binary())
    chunked = pa.chunked_array([whole.slice(0, 70), whole.slice(70, 1), whole.slice(71, 0), whole.slice(71)])
    for data in (whole, whole.slice(13, 101), chunked, chunked.slice(50, 100), pa.array(values[:9], pa.binary_view())):
        assert b"".join(comma_joined(data)) == b",".join(data.to_pylist())
    assert comma_joined(whole.slice(5, 0)) == []
    with_null = pa.array([values[0], None, values[1]], pa.binary())
    assert b"".join(comma_joined(with_null)) == values[0] + b"," + values[1]
    only_nulls = pa.chunked_array([whole.slice(0, 2), pa.array([None], pa.binary()), whole.slice(2, 1)])
    assert b"".join(comma_joined(only_nulls)) == b",".join(values[:3])
    stored = pa.table({"seq": pa.array(range(200), pa.int64()), "data": whole})
    assert b"".join(StoredRun(stored.slice(20, 30)).joined()) == b",".join(values[20:50])
    assert b"".join(ArrowRun(0, whole.slice(7, 9), 0).joined()) == b",".join(values[7:16])
    assert b"".join(MemoryRun(3, values[3:6], array("q", [0, 0, 0])).joined()) == b",".join(values[3:6])
