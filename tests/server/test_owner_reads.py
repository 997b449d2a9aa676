"""A fresh owner reading history from S3 fetches each data file once, not once per read (issue 41).

A server in ``--durability delta`` mode that has just started (as a shard server that took
over a shard: its memory tail is empty) answers every read from the Delta table. Readers
catching up from the start again and again, and readers starting in the middle, must not
make it fetch the same small Parquet files (footers, row groups) from the store for every
request: data files never change once written, so what was fetched once is kept
(``storage.data_files.FileBytes``, ``storage.footers``). Before, every read fetched each
row group it decoded again, a GET per column chunk: 13-25 GETs per file for the reads
below, and a 1,000-message read took about 2 s.

The engine's history cache (decoded messages) is off here (``--history-cache-bytes 0``):
it is bounded and let go under memory pressure, and an owner's many streams outgrow it, so
the storage layer must not fetch again what it fetched. The server reaches moto's S3
through ``FaultProxy`` (nothing injected), whose log is every request the store received:
requests are counted per object key.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import requests
from fault_proxy import FaultProxy
from servers import MotoServer, ServerProcess, session

from durable_streams_server.storage import data_files

JSON = {"Content-Type": "application/json"}
STREAMS = 3
MESSAGES = 2000
BATCH = 50
"""Messages per append: each append is a commit of its own, so the table has ~100 small files."""
ROUNDS = 4
"""Rounds of reads after the first catch-up."""


def message(stream: int, seq: int) -> dict[str, object]:
    return {"stream": stream, "seq": seq, "pad": "x" * (seq % 50)}


def requests_per_file(proxy: FaultProxy, method: str, first: int = 0, stop: int | None = None) -> Counter[str]:
    """Requests of ``method`` per data file (``.parquet``, not a Delta log checkpoint) the store
    received, of the proxy's log entries ``first..stop``."""
    paths = (target.split("?", 1)[0] for seen, target, _ in proxy.log[first:stop] if seen == method)
    return Counter(path for path in paths if path.endswith(".parquet") and "/_delta_log/" not in path)


def offset_at(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


def read_from(http: requests.Session, url: str, offset: str, count: int) -> list[object]:
    """``count`` messages from ``offset`` (fewer if the stream ends first), response after response."""
    found: list[object] = []
    while len(found) < count:
        response = http.get(url, params={"offset": offset})
        assert response.status_code == 200, response.text
        found += json.loads(response.content)
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            break
    return found[:count]


def concurrently(*calls: Callable[[], None]) -> None:
    """Run the calls on threads of their own; the first failure is raised here."""
    with ThreadPoolExecutor(len(calls)) as pool:
        for future in [pool.submit(call) for call in calls]:
            future.result()


def start_owner(server_factory: Callable[..., ServerProcess], moto: MotoServer, proxy: FaultProxy) -> ServerProcess:
    bucket = f"owner-reads-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    storage = [arg.replace(moto.endpoint, proxy.url) for arg in moto.server_args(f"s3://{bucket}/ds")]
    flags = ("--durability", "delta", "--compaction-interval-s", "0", "--history-cache-bytes", "0")
    return server_factory(*storage, *flags)


def append_streams(server: ServerProcess) -> tuple[list[str], list[list[dict[str, object]]]]:
    """``STREAMS`` JSON streams of ``MESSAGES`` each, appended concurrently ``BATCH`` at a time."""
    http = session()
    urls = [server.stream_url(f"s{n}") for n in range(STREAMS)]
    expected = [[message(n, seq) for seq in range(MESSAGES)] for n in range(STREAMS)]
    for url in urls:
        assert http.put(url, headers=JSON).status_code == 201

    def append(n: int) -> Callable[[], None]:
        def run() -> None:
            writer = session()
            for first in range(0, MESSAGES, BATCH):
                body = json.dumps(expected[n][first : first + BATCH])
                response = writer.post(urls[n], headers=JSON, data=body)
                assert response.status_code == 204, response.text

        return run

    concurrently(*(append(n) for n in range(STREAMS)))
    return urls, expected


def test_a_fresh_owner_fetches_each_data_file_once_across_reads(
    server_factory: Callable[..., ServerProcess], moto: MotoServer
) -> None:
    with FaultProxy(moto.port) as proxy:
        server = start_owner(server_factory, moto, proxy)
        urls, expected = append_streams(server)
        server.restart()  # a fresh owner: nothing in memory, every read goes to Delta

        def catch_up(n: int) -> Callable[[], None]:
            def run() -> None:
                assert read_from(session(), urls[n], "-1", MESSAGES) == expected[n]

            return run

        def from_middle(n: int, seq: int) -> Callable[[], None]:
            def run() -> None:
                assert read_from(session(), urls[n], offset_at(seq), 1000) == expected[n][seq : seq + 1000]

            return run

        start = len(proxy.log)
        concurrently(*(catch_up(n) for n in range(STREAMS)))  # the first catch-up
        first_pass = len(proxy.log)
        for round_ in range(ROUNDS):
            middles = (from_middle(n, 500 + 97 * round_ + n) for n in range(STREAMS))
            concurrently(*(catch_up(n) for n in range(STREAMS)), *middles)

        files = requests_per_file(proxy, "GET", start, first_pass)
        gets = requests_per_file(proxy, "GET", start)
        later = requests_per_file(proxy, "GET", first_pass)
        heads = requests_per_file(proxy, "HEAD", start)
        assert len(files) >= 20, f"the streams are in {len(files)} files: expected many small ones"
        summary = (
            f"{len(files)} files: {sum(gets.values())} GETs, at most {max(gets.values())} of one file "
            f"({sum(later.values())} after the first catch-up), {sum(heads.values())} HEADs"
        )
        # Every file read once: by the first catch-up of whichever stream reached it first.
        assert max(gets.values()) <= 2, summary
        assert not later, summary  # every later read is answered from what was fetched
        assert max(heads.values(), default=0) <= 1, summary


# -- the cache itself (storage.data_files.FileBytes), over a local Parquet file ----------


class Store:
    """A local file opened as delta-rs opens an object store's: opens and reads counted."""

    def __init__(self, path: Path, delay_s: float = 0.0) -> None:
        self.path = path
        self.delay_s = delay_s
        self.opens = 0
        self.fetches: list[tuple[int, int]] = []
        """(start, bytes) of each read: each is one ranged GET on a store."""

    def open(self) -> _Raw:
        self.opens += 1
        return _Raw(self)


class _Raw:
    """(Holds no open file: ``pa.PythonFile`` leaves closing to whoever opened the handle.)"""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.position = 0

    def seek(self, position: int) -> None:
        self.position = position

    def read(self, nbytes: int) -> bytes:
        time.sleep(self.store.delay_s)  # (the store's latency: a slow read is what the fake is for)
        with open(self.store.path, "rb") as file:
            file.seek(self.position)
            data = file.read(nbytes)
        self.store.fetches.append((self.position, len(data)))
        self.position += len(data)
        return data

    def size(self) -> int:
        return self.store.path.stat().st_size

    def close(self) -> None:
        pass


def parquet_file(path: Path, rows: int, row_group_rows: int) -> int:
    table = pa.table({"seq": list(range(rows)), "data": [b"%06d" % n * 20 for n in range(rows)]})
    pq.write_table(table, path, row_group_size=row_group_rows, compression="none")
    return path.stat().st_size


def read_through(cache: data_files.FileBytes, name: str, size: int | None, store: Store) -> pa.Table:
    """The file read as history reads read it: the footer, then each row group, buffered."""
    metadata = pq.read_metadata(cache.open(name, size, store.open))
    parquet = pq.ParquetFile(
        cache.open(name, size, store.open), metadata=metadata, buffer_size=1 << 20, pre_buffer=False
    )
    return pa.Table.from_batches(
        batch for index in range(metadata.num_row_groups) for batch in parquet.iter_batches(1000, row_groups=[index])
    )


def test_file_bytes_are_fetched_once_and_read_exactly(tmp_path: Path) -> None:
    """A small file is one fetch however often it is read; a larger one a fetch per range
    read, each once; what is read is the file's own content."""
    small, large = tmp_path / "small.parquet", tmp_path / "large.parquet"
    sizes = {small: parquet_file(small, 500, 100), large: parquet_file(large, 60_000, 10_000)}
    assert sizes[small] < data_files.WHOLE_FILE_BYTES < sizes[large]
    cache = data_files.FileBytes(64 << 20)
    for path, size in sizes.items():
        store = Store(path)
        for _ in range(3):
            assert read_through(cache, path.name, size, store) == pq.read_table(path)
        if path is small:
            assert store.fetches == [(0, size)]
        else:
            assert len(store.fetches) == len(set(store.fetches)) > 6  # footer + row groups' columns
            assert all(length <= 1 << 20 for _, length in store.fetches)


def test_file_bytes_are_bounded_keyed_by_size_and_fetched_once_by_concurrent_reads(tmp_path: Path) -> None:
    path, rewritten = tmp_path / "f.parquet", tmp_path / "g.parquet"
    size, other_size = parquet_file(path, 500, 100), parquet_file(rewritten, 400, 100)
    cache = data_files.FileBytes(max_bytes=4 * size)
    stores = {name: Store(path) for name in "abcde"}
    for name in "abcda":
        read_through(cache, name, size, stores[name])
    assert cache.nbytes == 4 * size
    read_through(cache, "e", size, stores["e"])  # "b" goes: the least recently used
    assert cache.nbytes == 4 * size
    for name in "acde":
        read_through(cache, name, size, stores[name])
    assert [len(stores[name].fetches) for name in "abcde"] == [1] * 5
    read_through(cache, "b", size, stores["b"])
    assert len(stores["b"].fetches) == 2

    other = Store(rewritten)  # the same path with another size: another file, read anew
    assert read_through(cache, "a", other_size, other) == pq.read_table(rewritten)
    assert other.fetches == [(0, other_size)] and len(stores["a"].fetches) == 1

    small = data_files.FileBytes(max_bytes=2 * size)  # a file over a quarter of the bound is not fetched whole
    store = Store(path)
    assert read_through(small, "f", size, store) == read_through(small, "f", size, store) == pq.read_table(path)
    assert (0, size) not in store.fetches and 0 < small.nbytes <= 2 * size

    slow = Store(path, delay_s=0.2)
    shared = data_files.FileBytes(64 << 20)
    concurrently(*(lambda: read_through(shared, "s", size, slow) for _ in range(4)))
    assert slow.fetches == [(0, size)]
