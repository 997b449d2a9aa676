"""Reading ahead of a catch-up (``engine.history.ReadAhead``): the next response's history is read
while the last one is sent, taken by the request that follows, and never read twice.

Over real HTTP against a server on a real Delta table: a catch-up after a restart (every read from
Delta) is exact, starts a read ahead for its responses, and reads the stored bytes once; reads at
scattered offsets start none. The scheduling rules (sequential reads only, one per stream, the bound,
the memory budget, failures, close) on ``ReadAhead`` itself, over a storage stub that hands out
tables when told to.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pyarrow as pa
import pytest
from servers import ServerProcess, flushed, metric_sum, session, wait_for

from durable_streams_server.engine.history import HistoryCache, ReadAhead
from durable_streams_server.engine.memory import MemoryBudget
from durable_streams_server.protocol.offsets import Offset, parse_offset

OCTETS = {"Content-Type": "application/octet-stream"}
BUDGET = 64 * 1024
MESSAGE = 20_000
FLAGS = ("--max-read-bytes", str(BUDGET), "--flush-interval-ms", "50", "--compaction-interval-s", "0")


def _stored_stream(server: ServerProcess, name: str, count: int) -> tuple[str, list[bytes]]:
    http = session()
    url = server.stream_url(name)
    assert http.put(url, headers=OCTETS).status_code == 201
    rng = random.Random(count)
    messages = [rng.randbytes(MESSAGE) for _ in range(count)]
    for message in messages:
        assert http.post(url, headers=OCTETS, data=message).status_code == 204
    wait_for(flushed(server))
    return url, messages


def test_a_catch_up_reads_ahead_and_reads_each_stored_byte_once(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory(*FLAGS)
    url, messages = _stored_stream(server, "catch-up", 200)  # 4 MB: ~8 responses of 8 budgets
    server.restart()  # nothing in memory: every read goes to Delta
    http = session()
    read_before = metric_sum(url, "durable_streams_history_read_bytes_total")
    offset, body, responses = Offset(0), b"", 0
    while True:
        response = http.get(url, params={"offset": offset.encode()})
        assert response.status_code == 200
        body += response.content
        responses += 1
        offset = parse_offset(response.headers["Stream-Next-Offset"])
        if response.headers.get("Stream-Up-To-Date") == "true":
            break
    assert body == b"".join(messages)
    assert responses >= 6
    # Every response after the first was read ahead (the last one's read ahead is the tail's).
    assert metric_sum(url, "durable_streams_history_reads_ahead_total") >= responses - 2
    # A request that did not take its read ahead (or did not wait for it) reads its rows again.
    # Besides the messages, each data file's footer is read once (pyarrow reads a file's last 64 KiB).
    read = metric_sum(url, "durable_streams_history_read_bytes_total") - read_before
    files = len(list((server.data_dir / "delta" / "streams").glob("*.parquet")))
    assert files >= 2
    assert read < 1.2 * len(body) + files * 64 * 1024


def test_reads_at_scattered_offsets_read_nothing_ahead(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*FLAGS)
    url, messages = _stored_stream(server, "scattered", 120)
    server.restart()
    http = session()
    for seq in (90, 17, 60, 33, 101):
        response = http.get(url, params={"offset": Offset(seq).encode()})
        assert response.status_code == 200
        assert response.content.startswith(messages[seq])
    assert metric_sum(url, "durable_streams_history_reads_ahead_total") == 0


# -- the rules, on ReadAhead itself ---------------------------------------------------


def _rows(start: int, count: int) -> pa.Table:
    return pa.table({"seq": pa.array(range(start, start + count), pa.int64()), "data": [b"x" * 10] * count})


class _Storage:
    """Hands out ``_rows`` for each history read once ``release`` is set (or fails, if told to)."""

    def __init__(self) -> None:
        self.reads: list[tuple[int, int, int, int]] = []
        self.release = asyncio.Event()
        self.fail = False

    async def read_history(self, uid: int, start_seq: int, end_seq: int, max_bytes: int) -> pa.Table:
        self.reads.append((uid, start_seq, end_seq, max_bytes))
        await self.release.wait()
        if self.fail:
            raise OSError("the store is down")
        return _rows(start_seq, 10)


def _ahead(memory_bytes: int = 1 << 20, max_ahead: int = 2) -> tuple[_Storage, HistoryCache, ReadAhead]:
    storage = _Storage()
    cache = HistoryCache(1 << 20, MemoryBudget(memory_bytes))
    return storage, cache, ReadAhead(storage, cache, max_ahead)  # type: ignore[arg-type]


async def _settled() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_only_a_sequential_read_that_leaves_history_reads_ahead() -> None:
    async def run() -> None:
        storage, cache, ahead = _ahead()
        ahead.follow(1, 40, 50, 100, 1000, first=False)  # (nothing before it: not sequential)
        ahead.follow(2, 0, 10, 10, 1000, first=True)  # (nothing left below the memory tail)
        cache.put(4, _rows(10, 10))
        ahead.follow(4, 0, 10, 100, 1000, first=True)  # (the cache holds it already)
        assert ahead.started == 0
        ahead.follow(1, 50, 60, 100, 1000, first=False)  # where uid 1's last read ended
        ahead.follow(3, 0, 10, 100, 1000, first=True)
        assert ahead.started == 2
        await _settled()
        assert storage.reads == [(1, 60, 100, 1000), (3, 10, 100, 1000)]
        storage.release.set()
        await ahead.arrived(1, 60)
        hit = cache.get(1, 60)
        assert hit is not None and hit["seq"].to_pylist() == list(range(60, 70))
        await ahead.close()

    asyncio.run(run())


def test_one_per_stream_at_most_max_ahead_and_within_the_memory_budget() -> None:
    async def run() -> None:
        storage, cache, ahead = _ahead(memory_bytes=2000, max_ahead=2)
        ahead.follow(1, 0, 10, 100, 400, first=True)
        ahead.follow(1, 10, 20, 100, 400, first=False)  # (uid 1 has one in flight)
        ahead.follow(2, 0, 10, 100, 1700, first=True)  # (400 + 1700 reserved would pass the budget)
        assert ahead.started == 1 and cache.memory.in_flight == 400
        ahead.follow(3, 0, 10, 100, 400, first=True)
        ahead.follow(4, 0, 10, 100, 100, first=True)  # (two in flight already)
        assert ahead.started == 2
        ahead.follow(5, 0, 10, 100, 2 << 20, first=True)  # (larger than the cache could keep)
        assert ahead.started == 2
        storage.release.set()
        await _settled()
        assert cache.memory.in_flight == 0  # (the reservations went back; the cache holds the rows)
        assert cache.get(1, 10) is not None and cache.get(3, 10) is not None
        await ahead.close()

    asyncio.run(run())


def test_a_failed_read_ahead_leaves_nothing_behind_and_close_cancels() -> None:
    async def run() -> None:
        storage, cache, ahead = _ahead()
        storage.fail = True
        ahead.follow(1, 0, 10, 100, 500, first=True)
        storage.release.set()
        await ahead.arrived(1, 10)  # (its failure is not the request's: it reads the rows itself)
        assert cache.get(1, 10) is None and cache.memory.in_flight == 0
        storage.release.clear()
        storage.fail = False
        ahead.follow(1, 10, 20, 100, 500, first=False)
        await _settled()
        assert cache.memory.in_flight == 500
        await ahead.close()
        assert cache.memory.in_flight == 0 and cache.get(1, 20) is None

    asyncio.run(run())


@pytest.mark.parametrize("first", [True, False])
def test_a_read_ahead_is_followed_from_the_end_of_the_last_read(first: bool) -> None:
    """The read ahead's own result, taken by the next request, leads to the next read ahead: the
    request's ``follow`` starts where the read ahead ended."""

    async def run() -> None:
        storage, _, ahead = _ahead()
        if not first:
            ahead.follow(1, 0, 10, 100, 500, first=False)
        ahead.follow(1, 10, 20, 100, 500, first=first)
        storage.release.set()
        await ahead.arrived(1, 20)
        ahead.follow(1, 20, 30, 100, 500, first=False)
        await ahead.arrived(1, 30)
        assert [read[1] for read in storage.reads] == [20, 30]
        await ahead.close()

    asyncio.run(run())
