"""The in-memory tail (``engine.memory_tail``): plain appends as lists, bulk appends as Arrow
chunks, read by byte budget, measured and trimmed across chunk borders exactly as one list
of messages would be."""

from __future__ import annotations

import pyarrow as pa
import pytest

from durable_streams_server.engine.memory_tail import MemoryTail
from durable_streams_server.engine.runs import ArrowRun, MemoryRun
from durable_streams_server.engine.stream import Stream
from durable_streams_server.storage.message_batch import MessageBatch


def _filled() -> tuple[MemoryTail, list[bytes], list[int]]:
    """Seqs 10…: plain, plain, bulk, plain, bulk (sliced), bulk."""
    tail, messages, stamps = MemoryTail(), [], []
    seq = 10
    appends: list[tuple[list[bytes], bool]] = [
        ([b"a" * 3], False),
        ([b"bb", b"c" * 7], False),
        ([bytes([i]) * (i + 1) for i in range(6)], True),
        ([b"plain"], False),
        ([b"x" * 4, b"y", b"z" * 9], True),
        ([b"\x00\r\n--", b""[:0] + b"e"], True),
    ]
    for ts, (batch, bulk) in enumerate(appends):
        if bulk:
            array = pa.array([b"pad", *batch, b"pad"], pa.binary()).slice(1, len(batch))
            added = tail.add(seq, MessageBatch(array), ts)
        else:
            added = tail.add(seq, tuple(batch), ts)
        assert added == sum(map(len, batch))
        messages += batch
        stamps += [ts] * len(batch)
        seq += len(batch)
    return tail, messages, stamps


def _reference_take(sizes: list[int], budget: int, at_least_one: bool) -> int:
    kept, used = 0, 0
    while kept < len(sizes) and (used < budget or (at_least_one and kept == 0)):
        used += sizes[kept]
        kept += 1
    return kept


@pytest.mark.parametrize("start", [10, 11, 13, 16, 19, 21, 23])
@pytest.mark.parametrize("budget", [0, 1, 4, 9, 20, 1000])
@pytest.mark.parametrize("at_least_one", [True, False])
def test_runs_take_what_one_list_would(start: int, budget: int, at_least_one: bool) -> None:
    tail, messages, stamps = _filled()
    end = 10 + len(messages)
    runs = tail.runs(start, end, budget, at_least_one=at_least_one)
    data, times = [], []
    for run in runs:
        assert isinstance(run, MemoryRun | ArrowRun)
        chunk, chunk_times = run.lists()
        data += chunk
        times += chunk_times
        assert run.columns()["data"].to_pylist() == chunk
    kept = _reference_take([len(m) for m in messages[start - 10 :]], budget, at_least_one)
    assert data == messages[start - 10 : start - 10 + kept]
    assert times == stamps[start - 10 : start - 10 + kept]
    if runs:
        assert runs[0].columns()["seq"][0].as_py() == start


def test_get_sizes_and_drop_across_chunks() -> None:
    tail, messages, _ = _filled()
    assert [tail.get(10 + i) for i in range(len(messages))] == messages
    assert tail.sizes(12, 20).tolist() == [len(m) for m in messages[2:10]]
    for start in range(10, 10 + len(messages)):  # (summed without an array within a chunk of lists)
        for stop in range(start, 10 + len(messages) + 1):
            assert tail.bytes_between(start, stop) == sum(len(m) for m in messages[start - 10 : stop - 10])
    for count in (1, 2, 4, 3):
        base = 10 + len(messages) - len(tail)
        tail.drop(count)
        assert len(tail) == len(messages) - (base - 10) - count
    base = 10 + len(messages) - len(tail)
    assert [tail.get(seq) for seq in range(base, 10 + len(messages))] == messages[base - 10 :]
    assert tail.sizes(base, 10 + len(messages)).tolist() == [len(m) for m in messages[base - 10 :]]


def test_stream_trims_flushed_bulk_messages_by_bytes() -> None:
    stream = Stream("s", 1, "application/octet-stream", 0)
    stream.remember(0, (b"ab",), 1)
    stream.remember(1, MessageBatch(pa.array([b"1" * 10, b"2" * 10, b"3" * 10], pa.binary())), 2)
    stream.remember(4, (b"cd", b"ef"), 3)
    assert stream.mem_bytes == 36 and not stream.batches.get(1) and stream.batches[4] == 2
    stream.mark_flushed(3)
    assert stream.flushed_mem_bytes == 22
    stream.trim_flushed(30)  # drop 6+ bytes: "ab" and the first bulk message
    assert (stream.mem_base, stream.mem_bytes, stream.flushed_mem_bytes) == (2, 24, 10)
    stream.trim_flushed(0)  # only the flushed ones may go
    assert (stream.mem_base, stream.mem_bytes) == (3, 14)
    assert stream.mem.get(3) == b"3" * 10 and stream.mem.get(5) == b"ef"


@pytest.mark.parametrize(
    "appends",
    [
        [[b"one"]],
        [[b"a"], [b"bc"], [b"def"]],
        [[b"x" * 5, b"y"], [b"z"]],
        [[b"a"], "bulk", [b"b"], [b"cc"], "bulk", [b"d"]],
    ],
    ids=["a single message", "single messages one after another", "lists then one", "single around bulk"],
)
def test_single_messages_read_measure_and_drop_as_one_list_would(appends: list[list[bytes] | str]) -> None:
    """Single plain messages (held without lists until a second one comes) against a plain list."""
    tail, messages, stamps, seq = MemoryTail(), [], [], 20
    for ts, batch in enumerate(appends):
        if batch == "bulk":
            batch = [b"B" * (ts + 1), b"b"]
            tail.add(seq, MessageBatch(pa.array(batch, pa.binary())), ts)
        else:
            assert not isinstance(batch, str)
            tail.add(seq, tuple(batch), ts)
        messages += batch
        stamps += [ts] * len(batch)
        seq += len(batch)
    while messages:
        base = seq - len(messages)
        assert len(tail) == len(messages)
        assert [tail.get(s) for s in range(base, seq)] == messages
        assert tail.sizes(base, seq).tolist() == [len(m) for m in messages]
        for start in range(base, seq):
            for stop in range(start, seq + 1):
                assert tail.bytes_between(start, stop) == sum(map(len, messages[start - base : stop - base]))
            for budget in (0, 1, 3, 100):
                runs = tail.runs(start, seq, budget, at_least_one=True)
                kept = _reference_take([len(m) for m in messages[start - base :]], budget, True)
                assert [m for run in runs for m in run.lists()[0]] == messages[start - base : start - base + kept]
                assert [t for run in runs for t in run.lists()[1]] == stamps[start - base : start - base + kept]
            for at_ms in range(len(appends) + 1):
                late = [i for i, t in enumerate(stamps) if t >= at_ms and i >= start - base]
                assert tail.first_stamped(at_ms, start, seq) == (base + late[0] if late else None)
        tail.drop(1)
        messages, stamps = messages[1:], stamps[1:]
    assert len(tail) == 0 and tail.runs(seq, seq, 10, at_least_one=True) == []
