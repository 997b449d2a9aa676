"""The Arrow read extension: ``Accept: application/vnd.apache.arrow.stream`` answers an Arrow
IPC stream of (seq, ts, data), the same messages, offsets and append times as every other read,
whether they come from Delta, the memory tail or a fork's source; ``end`` bounds a response.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from deltalake import DeltaTable
from multipart_parsing import read_all_parts
from servers import ServerProcess, append_all, wait_for

ARROW = "application/vnd.apache.arrow.stream"
BINARY = {"Content-Type": "application/octet-stream"}
JSON = {"Content-Type": "application/json"}
IPC_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
MAX_READ_BYTES = 256
"""The server's --max-read-bytes here: an Arrow response carries up to 8x that (2048 bytes)."""


def _offset(seq: int, within: int = 0) -> str:
    return f"{seq:016d}_{within:016d}"


def _messages(count: int, salt: int) -> list[bytes]:
    """Byte messages of 1 to 266 bytes, with CR/LF, NUL and a multipart-looking delimiter."""
    return [
        (bytes([salt, i % 256]) + b"\r\n--ds-\x00" + bytes(range(256)))[: 1 + (i * 37 + salt) % 266]
        for i in range(count)
    ]


def _arrow_get(
    http: requests.Session, url: str, offset: str, *, end: str | None = None, live: str | None = None
) -> requests.Response:
    params = {"offset": offset}
    if end is not None:
        params["end"] = end
    if live is not None:
        params["live"] = live
    return http.get(url, params=params, headers={"Accept": ARROW}, timeout=30)


def _table(response: requests.Response) -> pa.Table:
    assert response.status_code == 200, (response.status_code, response.text)
    assert response.headers["Content-Type"] == ARROW
    # One whole IPC stream and nothing after it: its last bytes are the end-of-stream marker.
    assert response.content.endswith(IPC_END_OF_STREAM)
    return pa.ipc.open_stream(response.content).read_all()


def _read_all_arrow(http: requests.Session, url: str, offset: str) -> tuple[list[pa.Table], str]:
    """Arrow catch-up reads from ``offset`` until up to date: one table per response."""
    tables = []
    for _ in range(10_000):
        response = _arrow_get(http, url, offset)
        tables.append(_table(response))
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            return tables, offset
    raise AssertionError("never up to date")


def _stored_messages(data_dir: Path, stream: str) -> int:
    table = DeltaTable(str(data_dir / "delta" / "streams")).to_pyarrow_table(columns=["stream", "kind"])
    return sum(1 for row in table.to_pylist() if row["kind"] == "message" and row["stream"] == stream)


@pytest.fixture(scope="module")
def arrow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """History leaves memory as soon as it is in Delta, and read budgets are small; one
    server for the module (each test reads only its own streams)."""
    args = (
        "--tail-cache-bytes", "0", "--flush-interval-ms", "100", "--max-read-bytes", str(MAX_READ_BYTES),
        "--long-poll-timeout-ms", "5000",
    )  # fmt: skip
    server = ServerProcess(tmp_path_factory.mktemp("arrow") / "data", args).start()
    yield server
    server.kill()


def test_arrow_reads_give_every_message_from_delta_memory_and_a_forks_source(
    arrow_server: ServerProcess, http: requests.Session
) -> None:
    source = arrow_server.stream_url("arrow-source")
    assert http.put(source, headers=BINARY).status_code == 201
    history, recent = _messages(60, 1), _messages(20, 2)
    append_all(http, source, BINARY, history)
    in_delta = "v1/stream/arrow-source"
    wait_for(lambda: _stored_messages(arrow_server.data_dir, in_delta) >= 60, timeout_s=20)  # gone from memory
    append_all(http, source, BINARY, recent)
    fork = arrow_server.stream_url("arrow-fork")
    created = http.put(
        fork, headers={**BINARY, "Stream-Forked-From": "/v1/stream/arrow-source", "Stream-Fork-Offset": _offset(50)}
    )
    assert created.status_code == 201, created.text
    own = _messages(10, 3)
    append_all(http, fork, BINARY, own)

    for url, expected in ((source, history + recent), (fork, history[:50] + own)):
        tables, end = _read_all_arrow(http, url, "-1")
        assert len(tables) > 2  # the byte budget cut the read into several responses
        for table in tables:
            assert table.schema.names == ["seq", "ts", "data"]
            assert table.schema.metadata == {b"content_type": b"application/octet-stream"}
            assert sum(len(data) for data in table.column("data").to_pylist()) <= 8 * MAX_READ_BYTES + 300
        rows = pa.concat_tables(tables).to_pylist()
        assert [row["data"] for row in rows] == expected
        assert [row["seq"] for row in rows] == list(range(len(expected)))
        assert end == _offset(len(expected))
        parts, _ = read_all_parts(http, url, "-1")  # the multipart extension agrees, timestamps included
        assert [part.header("stream-offset") for part in parts] == [_offset(row["seq"]) for row in rows]
        stamps = [int(row["ts"].timestamp() * 1000) for row in rows]
        assert stamps == [int(part.header("stream-timestamp")) for part in parts]


def test_end_bounds_a_response_and_a_start_inside_a_message_cuts_it(
    arrow_server: ServerProcess, http: requests.Session
) -> None:
    url = arrow_server.stream_url("arrow-bounds")
    assert http.put(url, headers=BINARY).status_code == 201
    messages = [bytes([i]) * 40 for i in range(1, 11)]
    append_all(http, url, BINARY, messages)

    response = _arrow_get(http, url, _offset(2), end=_offset(5))
    assert [row["seq"] for row in _table(response).to_pylist()] == [2, 3, 4]
    assert response.headers["Stream-Next-Offset"] == _offset(5)
    assert "Stream-Up-To-Date" not in response.headers
    # An end inside a message keeps that message (its own offset is before the end).
    assert [row["seq"] for row in _table(_arrow_get(http, url, _offset(2), end=_offset(5, 7))).to_pylist()] == [
        2,
        3,
        4,
        5,
    ]
    tail = _arrow_get(http, url, _offset(8), end=_offset(99))
    assert [row["seq"] for row in _table(tail).to_pylist()] == [8, 9]
    assert tail.headers["Stream-Up-To-Date"] == "true"

    inside = _table(_arrow_get(http, url, _offset(3, 15))).to_pylist()
    assert [row["data"] for row in inside] == [messages[3][15:], *messages[4:]]
    assert [row["seq"] for row in inside] == list(range(3, 10))

    bad = _arrow_get(http, url, _offset(2), end="tomorrow")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "INVALID_OFFSET"


def test_empty_read_json_content_type_and_etags(arrow_server: ServerProcess, http: requests.Session) -> None:
    url = arrow_server.stream_url("arrow-json")
    assert http.put(url, headers=JSON).status_code == 201
    at_tail = _arrow_get(http, url, "-1")
    empty = _table(at_tail)
    assert empty.num_rows == 0 and empty.schema.metadata == {b"content_type": b"application/json"}
    assert at_tail.headers["Stream-Up-To-Date"] == "true"

    assert http.post(url, headers=JSON, data=b'[{"a": 1}, [2, 3], "four"]').status_code == 204
    response = _arrow_get(http, url, "-1")
    assert _table(response).column("data").to_pylist() == [b'{"a":1}', b"[2,3]", b'"four"']
    plain = http.get(url, params={"offset": "-1"}, timeout=30)
    framed = http.get(url, params={"offset": "-1"}, headers={"Accept": "multipart/mixed"}, timeout=30)
    assert len({response.headers["ETag"], plain.headers["ETag"], framed.headers["ETag"]}) == 3
    again = http.get(
        url, params={"offset": "-1"}, headers={"Accept": ARROW, "If-None-Match": response.headers["ETag"]}, timeout=30
    )
    assert again.status_code == 304


def test_long_poll_answers_arrow_when_data_arrives(arrow_server: ServerProcess, http: requests.Session) -> None:
    url = arrow_server.stream_url("arrow-live")
    assert http.put(url, headers=BINARY).status_code == 201
    tail = http.head(url).headers["Stream-Next-Offset"]
    appended = threading.Timer(0.3, lambda: requests.post(url, headers=BINARY, data=b"late", timeout=30))
    appended.start()
    started = time.monotonic()
    response = _arrow_get(http, url, tail, live="long-poll")
    appended.join()
    assert time.monotonic() - started < 4  # woken by the append, not by the 5 s timeout
    assert _table(response).column("data").to_pylist() == [b"late"]
