"""Reading modes (catch-up, long-poll, SSE) against our server and the reference server."""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

import pytest
import requests
from client_support import later, unique
from conftest import SSE_RECONNECT_MS

from pyspark_durable_streams.client import Client, Stream
from pyspark_durable_streams.client.reading import LiveMode

MODES: list[LiveMode | None] = [None, *get_args(LiveMode)]


@pytest.mark.parametrize("live", MODES)
def test_json_messages_come_one_per_item_and_stop_at_eof(
    new_stream: Callable[..., Stream], live: LiveMode | None
) -> None:
    stream = new_stream("json-read")
    stream.create("application/json")
    stream.append_json_batch([{"n": 1}, {"n": 2}])
    stream.append_json([3, 4])
    stream.close()
    with stream.read(live=live) as reader:
        messages = list(reader)
        assert reader.closed and reader.up_to_date
    assert [m.json() for m in messages] == [{"n": 1}, {"n": 2}, [3, 4]]
    assert messages[-1].next_offset == stream.metadata().next_offset == reader.offset


@pytest.mark.parametrize("live", MODES)
def test_binary_bytes_are_exact_in_every_mode(new_stream: Callable[..., Stream], live: LiveMode | None) -> None:
    payload = bytes([0x00, 0x0A, 0x0D, 0xFF, 0xFE, 0x00, 0x0A, 0x0D]) + bytes(range(256)) * 4
    stream = new_stream("binary")
    stream.create("application/octet-stream", data=payload[:7])
    stream.append(payload[7:])
    stream.close()
    assert b"".join(m.data for m in stream.read(live=live)) == payload


@pytest.mark.parametrize("live", get_args(LiveMode))
def test_live_readers_see_appends_made_while_they_wait(new_stream: Callable[..., Stream], live: LiveMode) -> None:
    stream = new_stream("live")
    stream.create("text/plain", data="old")
    later(0.3, lambda: stream.append("new-1"))
    later(0.6, lambda: stream.close("new-2"))
    with stream.read("now", live=live) as reader:
        assert "".join(m.text() for m in reader) == "new-1new-2"
        assert reader.closed


def test_resume_from_any_offset(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("resume")
    stream.create("text/plain")
    offsets = [stream.append(f"m{i};").next_offset for i in range(5)]
    for index, offset in enumerate(offsets):
        assert offset is not None
        assert "".join(m.text() for m in stream.read(offset)) == "".join(f"m{i};" for i in range(index + 1, 5))
    reader = stream.read()
    assert "".join(m.text() for m in reader) == "m0;m1;m2;m3;m4;"
    assert reader.offset == offsets[-1] and reader.up_to_date and not reader.closed
    assert list(stream.read("now")) == []


def test_cursor_is_echoed_on_long_poll(base_url: str) -> None:
    session = requests.Session()
    urls: list[str] = []
    session.hooks["response"].append(lambda response, *args, **kwargs: urls.append(str(response.request.url)))
    with Client(base_url, session=session) as client:
        stream = client.stream(f"v1/stream/{unique('cursor')}")
        stream.create("text/plain", data="x")
        later(1.2, stream.close)  # at least one 204 (500 ms server timeout) before the EOF
        with stream.read("now", live="long-poll") as reader:
            assert list(reader) == []
            assert reader.closed and reader.cursor is not None
    polls = [url for url in urls if "live=long-poll" in url]
    assert len(polls) >= 2
    assert "cursor=" not in polls[0] and all("cursor=" in url for url in polls[1:])


def test_message_boundaries_or_fallback(new_stream: Callable[..., Stream], server_name: str) -> None:
    stream = new_stream("boundaries")
    stream.create("application/json")
    stream.append_json_batch(["a", "b"])
    stream.append_json("c")
    messages = list(stream.read())
    assert [m.json() for m in messages] == ["a", "b", "c"]
    end = stream.metadata().next_offset
    assert messages[-1].next_offset == end
    if server_name == "ours":  # multipart/mixed: every message has its own offset and timestamp
        offsets = [m.offset for m in messages]
        assert all(offsets) and offsets == sorted(offsets) and len(set(offsets)) == 3
        assert [m.next_offset for m in messages[:-1]] == offsets[1:]
        assert all(m.timestamp_ms for m in messages)
        assert [m.json() for m in stream.read(offsets[1])] == ["b", "c"]
    else:  # plain JSON array: only the edges of the response are known
        assert [m.offset for m in messages] == [None, None, None]  # read from -1, a sentinel
        assert [m.next_offset for m in messages[:-1]] == [None, None]
    raw = new_stream("boundaries-bytes")
    raw.create("application/octet-stream")
    for part in (b"one", b"two", b"three"):
        raw.append(part)
    items = [m.data for m in raw.read()]
    assert items == ([b"one", b"two", b"three"] if server_name == "ours" else [b"onetwothree"])


def test_sse_reconnects_when_the_server_ends_the_connection(our_client: Client) -> None:
    """Our server (in these tests) ends SSE responses every 1.5 s; the reader must resume
    from the last control offset: every message once, in order, across connections."""
    session = requests.Session()
    connections: list[str] = []
    session.hooks["response"].append(lambda response, *args, **kwargs: connections.append(str(response.request.url)))
    client = Client(our_client.transport.base_url, session=session)
    stream = client.stream(f"v1/stream/{unique('reconnect')}")
    stream.create("application/json")
    total = 12
    for i in range(total):
        later(0.3 * i, lambda i=i: stream.append_json(i))
    later(0.3 * total + 0.2, stream.close)
    assert [m.json() for m in stream.read(live="sse")] == list(range(total))
    sse = [url for url in connections if "live=sse" in url]
    assert len(sse) >= (0.3 * total * 1000) // SSE_RECONNECT_MS
    assert "cursor=" in sse[-1]
