"""``Stream.read_arrow``: catch-up reads through our server's Arrow extension; a clear error
from servers without it; reads bounded by ``end``; resumption across a server restart."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyarrow as pa
import pytest
from client_support import unique
from servers import ServerProcess

from pyspark_durable_streams.client import Backoff, Client, ResponseError, Stream


def _rows(stream: Stream, offset: str = "-1", end: str | None = None) -> list[dict[str, object]]:
    return pa.concat_tables([found.table for found in stream.read_arrow(offset, end=end)]).to_pylist()


def test_arrow_reads_every_message_with_its_sequence(our_client: Client) -> None:
    stream = our_client.stream(f"v1/stream/{unique('arrow')}")
    stream.create("application/json")
    stream.append_json_batch([{"n": n} for n in range(5)])
    stream.append_json("last")
    slices = list(stream.read_arrow())
    assert all(found.content_type == "application/json" for found in slices)
    assert slices[0].start == "-1" and slices[-1].next_offset == stream.metadata().next_offset
    rows = pa.concat_tables([found.table for found in slices]).to_pylist()
    assert [row["data"] for row in rows] == [b'{"n":0}', b'{"n":1}', b'{"n":2}', b'{"n":3}', b'{"n":4}', b'"last"']
    assert [row["seq"] for row in rows] == list(range(6))
    assert all(row["ts"] is not None for row in rows)

    third = f"{2:016d}_{0:016d}"
    fifth = f"{4:016d}_{0:016d}"
    assert [row["seq"] for row in _rows(stream, third, end=fifth)] == [2, 3]
    reader = stream.read_arrow(third, end=fifth)
    assert [found.next_offset for found in reader] == [fifth] and reader.offset == fifth


def test_servers_without_the_extension_get_a_clear_error(new_stream: Callable[..., Stream], server_name: str) -> None:
    stream = new_stream("arrow-or-not")
    stream.create("text/plain", data="hello")
    if server_name == "ours":
        assert [row["data"] for row in _rows(stream)] == [b"hello"]
        return
    with pytest.raises(ResponseError, match=r"lacks the application/vnd\.apache\.arrow\.stream read extension"):
        list(stream.read_arrow())


def test_a_read_resumes_after_the_server_restarts(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory("--max-read-bytes", "1024")  # Arrow responses of up to 8 KiB
    with Client(server.url, backoff=Backoff(deadline_s=30)) as client:
        stream = client.stream("v1/stream/arrow-restart")
        stream.create("application/octet-stream")
        messages = [bytes([i]) * 1000 for i in range(40)]
        for message in messages:
            stream.append(message)
        reader = stream.read_arrow()
        first = next(reader)
        assert 0 < first.table.num_rows < len(messages)
        server.stop()
        restart = threading.Timer(1.0, server.start)
        restart.start()
        rest = list(reader)  # connection refused until the server is back: retried from reader.offset
        restart.join()
    data = pa.concat_tables([first.table, *(found.table for found in rest)]).column("data").to_pylist()
    assert data == messages
