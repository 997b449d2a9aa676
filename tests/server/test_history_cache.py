"""History read ahead from Delta serves later reads, and never serves what it should not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import requests
from servers import ServerProcess, append_all, flushed, read_all, wait_for

from durable_streams_server.engine.history import HistoryCache
from durable_streams_server.engine.memory import MemoryBudget

TEXT = {"Content-Type": "text/plain"}


def scan(first: int, count: int, size: int = 10) -> pa.Table:
    seqs = list(range(first, first + count))
    return pa.table({"seq": seqs, "data": [bytes([seq % 256]) * size for seq in seqs]})


def test_cache_answers_from_the_covering_scan_and_evicts_least_recently_used() -> None:
    one = scan(0, 10)
    cache = HistoryCache(max_bytes=one.nbytes * 2)
    cache.put(1, one)
    cache.put(2, scan(0, 10))
    hit = cache.get(1, 4)
    assert hit is not None and hit["seq"].to_pylist() == list(range(4, 10))
    assert cache.get(1, 10) is None and cache.get(3, 0) is None
    cache.put(1, scan(10, 10))  # evicts uid 2 (uid 1's first scan was used more recently)
    assert cache.get(2, 0) is None
    assert cache.get(1, 0) is not None and cache.get(1, 15) is not None


def test_the_reads_of_many_streams_are_found_by_their_stream() -> None:
    """Entries of many streams, several per stream: each read finds its stream's covering entry
    (looked up among that stream's entries), and what was evicted or let go is not found."""
    budget = MemoryBudget(1 << 30)
    cache = HistoryCache(max_bytes=1 << 30, memory=budget)
    for uid in range(2_000):
        cache.put(uid, scan(0, 5))
        cache.put(uid, scan(5 + uid % 3, 5))  # (a gap of uid % 3 after the first entry)
    for uid in (0, 1, 2, 1_234, 1_999):
        assert [cache.get(uid, seq) is not None for seq in range(12)] == [
            seq < 5 or 5 + uid % 3 <= seq < 10 + uid % 3 for seq in range(12)
        ]
        hit = cache.get(uid, 6 + uid % 3)
        assert hit is not None and hit["seq"].to_pylist() == list(range(6 + uid % 3, 10 + uid % 3))
    budget.resize(budget.used - 1)  # (the least recently used entry goes: uid 3's first, never read)
    assert cache.get(3, 0) is None and cache.get(3, 5) is not None and cache.get(4, 0) is not None
    small = HistoryCache(max_bytes=scan(0, 5).nbytes * 3)
    for uid in range(10):
        small.put(uid, scan(0, 5))
    assert [small.get(uid, 0) is not None for uid in range(10)] == [False] * 7 + [True] * 3


def test_cache_off_or_too_small_keeps_nothing() -> None:
    assert HistoryCache(max_bytes=0).get(1, 0) is None
    off = HistoryCache(max_bytes=0)
    off.put(1, scan(0, 10))
    assert off.get(1, 0) is None
    small = HistoryCache(max_bytes=10)
    small.put(1, scan(0, 10))
    assert small.get(1, 0) is None


def test_paged_history_reads_are_exact_and_a_recreated_stream_never_sees_the_old_one(
    server_factory: Callable[..., ServerProcess], http: requests.Session, tmp_path: Path
) -> None:
    """Small pages over history far below a tiny memory tail: every page after the first
    comes from read-ahead. Deleting and re-creating the stream (a new incarnation under the
    same name) must not serve the old incarnation's cached messages."""
    server = server_factory("--tail-cache-bytes", "512", "--max-read-bytes", "300", "--flush-interval-ms", "50")
    url = server.stream_url("paged")
    for generation in (b"old", b"new"):
        assert http.put(url, headers=TEXT).status_code == 201
        messages = [generation + b"-%04d;" % n + b"." * (n % 50) for n in range(400)]
        append_all(http, url, TEXT, messages)
        wait_for(flushed(server))
        assert read_all(http, url) == b"".join(messages)
        assert read_all(http, url) == b"".join(messages)  # again: served from the cache
        assert http.delete(url).status_code == 204
