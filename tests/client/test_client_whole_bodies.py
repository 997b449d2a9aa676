"""Bodies read in one piece (``_http.whole_body``: planned files' ``Range`` reads and Arrow
reads): a body cut short is an error, never a shorter answer, a body that stops coming times
out, and a body read to its end leaves its connection for the next request.

The server is a real socket on 127.0.0.1 that answers each request with the next scripted
reply, byte for byte (a reply may promise more bytes than it sends, then close).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pytest

from pyspark_durable_streams.client import Backoff, Client, TimeoutError, TransportError
from pyspark_durable_streams.client.arrow import ARROW_STREAM

FILE = bytes(range(256)) * 4


@dataclass
class ScriptedServer:
    """Answers request after request with ``replies`` in turn; counts connections."""

    replies: list[bytes]
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    stalled: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            pending = b""
            while self.replies:
                while b"\r\n\r\n" not in pending:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    pending += chunk
                head, pending = pending.split(b"\r\n\r\n", 1)
                self.requests.append(head)
                reply = self.replies.pop(0)
                conn.sendall(reply)
                if b"X-Then: stall" in reply:  # the rest of the body never comes; nor does a close
                    self.stalled.wait(30)
                    return
                if b"Connection: close" in reply:
                    return

    def close(self) -> None:
        self.stalled.set()
        self._listener.close()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    scripted = ScriptedServer([])
    yield scripted
    scripted.close()


def _reply(status: str, headers: dict[str, str], body: bytes, *, promised: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body) if promised is None else promised}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if promised is not None:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _ranged(first: int, last: int, *, cut: int | None = None) -> bytes:
    body = FILE[first : last + 1]
    headers = {"Content-Range": f"bytes {first}-{last}/{len(FILE)}"}
    if cut is None:
        return _reply("206 Partial Content", headers, body)
    return _reply("206 Partial Content", headers, body[:cut], promised=len(body))


def test_ranges_read_whole_share_one_connection(server: ScriptedServer) -> None:
    server.replies += [_ranged(0, 99), _ranged(500, 1023)]
    with Client(server.url) as client:
        file = client.open_file(f"{server.url}/f.parquet", len(FILE))
        assert file.read(100) == FILE[:100]
        file.seek(500)
        assert file.read() == FILE[500:]
    assert server.connections == 1
    assert [head.split(b"\r\n")[0] for head in server.requests] == [b"GET /f.parquet HTTP/1.1"] * 2


def test_a_range_cut_short_is_a_transport_error(server: ScriptedServer) -> None:
    server.replies += [_ranged(0, 999, cut=600)]
    with Client(server.url) as client, pytest.raises(TransportError):
        client.open_file(f"{server.url}/f.parquet", len(FILE)).read(1000)


def test_a_body_that_stops_coming_times_out(server: ScriptedServer) -> None:
    # (a Spark task must not wait forever on a file whose bytes stopped half way)
    stalled = _ranged(0, 999).replace(b"\r\n\r\n", b"\r\nX-Then: stall\r\n\r\n", 1)
    server.replies += [stalled[: len(stalled) - 400]]
    with Client(server.url, timeout=(5, 0.5)) as client, pytest.raises(TimeoutError):
        client.open_file(f"{server.url}/f.parquet", len(FILE)).read(1000)


def _arrow_stream(count: int) -> tuple[bytes, list[int]]:
    """An Arrow IPC stream of ``count`` messages in batches of 10, and where each batch ends."""
    table = pa.table(
        {
            "seq": pa.array(range(count), pa.int64()),
            "ts": pa.array([0] * count, pa.timestamp("us", tz="UTC")),
            "data": pa.array([b"m%d" % seq for seq in range(count)], pa.binary()),
        }
    )
    sink = pa.BufferOutputStream()
    ends = []
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=10):
            writer.write_batch(batch)
            ends.append(sink.tell())
    return sink.getvalue().to_pybytes(), ends


def _arrow_reply(body: bytes, count: int, *, cut: int | None = None) -> bytes:
    headers = {
        "Content-Type": ARROW_STREAM,
        "Stream-Next-Offset": f"{count:016d}_0000000000000000",
        "Stream-Up-To-Date": "true",
    }
    if cut is None:
        return _reply("200 OK", headers, body)
    return _reply("200 OK", headers, body[:cut], promised=len(body))


def test_an_arrow_body_cut_short_is_read_again_never_handed_out_short(server: ScriptedServer) -> None:
    body, batch_ends = _arrow_stream(50)
    # Cut right after the third batch: what arrived alone is a well-formed stream of 30 rows.
    assert pa.ipc.open_stream(body[: batch_ends[2]]).read_all().num_rows == 30
    server.replies += [_arrow_reply(body, 50, cut=batch_ends[2]), _arrow_reply(body, 50)]
    with Client(server.url, backoff=Backoff(initial_s=0.01, deadline_s=5)) as client:
        slices = list(client.stream(f"{server.url}/v1/stream/s").read_arrow())
    assert server.connections == 2  # the cut one, then the retry's
    assert [found.table.num_rows for found in slices] == [50]
    assert slices[0].table["seq"].to_pylist() == list(range(50))
