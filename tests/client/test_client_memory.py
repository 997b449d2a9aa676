"""Tailing a 200 MB stream keeps the client's memory bounded (responses are streamed).

Peak memory is measured with tracemalloc around the iteration (every Python allocation:
requests/urllib3 buffers, parsers, messages) and printed so it lands in the test log.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator

import pytest
from servers import ServerProcess

from pyspark_durable_streams.client import Client
from pyspark_durable_streams.client.reading import LiveMode

MiB = 1024 * 1024
APPEND_BYTES = 8 * MiB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("memory") / "data", ["--long-poll-timeout-ms", "500"]).start()
    yield server
    server.kill()


def make_stream(server: ServerProcess, name: str, size: int) -> str:
    """A closed binary stream of ``size`` bytes, written with a few large appends."""
    block = bytes(range(256)) * (APPEND_BYTES // 256)
    with Client(server.url) as client:
        stream = client.stream(f"v1/stream/{name}")
        stream.create("application/octet-stream")
        for _ in range(size // APPEND_BYTES):
            stream.append(block)
        stream.close()
    return stream.url


@pytest.mark.parametrize(
    ("live", "size", "limit"),
    [
        ("long-poll", 200 * MiB, 40 * MiB),
        # Our server streams SSE at ~20 MB/s (base64), so SSE reads a smaller stream to keep the suite fast.
        ("sse", 64 * MiB, 20 * MiB),
    ],
)
def test_tailing_a_large_stream_keeps_memory_bounded(
    server: ServerProcess, live: LiveMode, size: int, limit: int
) -> None:
    url = make_stream(server, f"big-{live}", size)
    total = 0
    started = time.monotonic()
    tracemalloc.start()
    try:
        with Client(server.url) as client, client.stream(url).read("-1", live=live) as reader:
            for message in reader:
                total += len(message.data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.monotonic() - started
    print(f"\ntailed {total / MiB:.0f} MiB with live={live} in {elapsed:.1f}s: peak {peak / MiB:.1f} MiB")
    assert total == size and reader.closed
    assert peak < limit, f"peak traced memory {peak / MiB:.1f} MiB for a {size / MiB:.0f} MiB stream"
