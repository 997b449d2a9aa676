"""Stream lifecycle and writes through the client, against our server and the reference server."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import requests

from pyspark_durable_streams.client import Client, Conflict, NotFound, Stream, StreamClosed


def test_create_is_idempotent_and_reports_conflicts(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("create")
    first = stream.create("text/plain")
    again = stream.create("text/plain")
    assert (first.created, again.created) == (True, False)
    assert first.content_type == "text/plain" and first.next_offset
    with pytest.raises(Conflict) as caught:
        stream.create("application/json")
    assert caught.value.status == 409 and stream.url in str(caught.value)


def test_create_with_body_ttl_expiry_and_closed(new_stream: Callable[..., Stream]) -> None:
    with_ttl = new_stream("ttl")
    with_ttl.create("text/plain", data="hello", ttl_seconds=3600)
    meta = with_ttl.metadata()
    assert (meta.content_type, meta.ttl_seconds, meta.closed) == ("text/plain", 3600, False)
    assert [m.text() for m in with_ttl.read()] == ["hello"]

    expiring = new_stream("expires")
    expiring.create("text/plain", expires_at=datetime.now(UTC) + timedelta(hours=1))
    assert expiring.metadata().expires_at is not None

    closed = new_stream("closed")
    result = closed.create("text/plain", data="all there is", closed=True)
    assert result.closed and closed.metadata().closed
    reader = closed.read()
    assert b"".join(m.data for m in reader) == b"all there is"
    assert reader.closed


def test_append_bytes_text_json_and_batches(new_stream: Callable[..., Stream]) -> None:
    raw = new_stream("bytes")
    raw.create("application/octet-stream")
    first = raw.append(b"\x00\x01")
    second = raw.append("é")
    assert first.next_offset is not None and second.next_offset is not None
    assert first.next_offset < second.next_offset
    assert b"".join(m.data for m in raw.read()) == b"\x00\x01" + "é".encode()

    doc = new_stream("json")
    doc.create("application/json")
    doc.append_json({"a": 1})
    doc.append_json([1, 2])  # an array value is one message, not two
    doc.append_json_batch(["x", None, [3]])
    assert [m.json() for m in doc.read()] == [{"a": 1}, [1, 2], "x", None, [3]]
    with pytest.raises(ValueError):
        doc.append_json_batch([])


def test_close_with_and_without_final_append(new_stream: Callable[..., Stream]) -> None:
    plain = new_stream("close")
    plain.create("text/plain", data="a")
    closed = plain.close()
    assert closed.closed and closed.next_offset
    assert plain.close().closed  # closing again is fine
    with pytest.raises(StreamClosed) as caught:
        plain.append("late")
    assert caught.value.final_offset == closed.next_offset

    final = new_stream("final")
    final.create("text/plain", data="a")
    result = final.close("z")
    assert result.closed
    assert "".join(m.text() for m in final.read()) == "az"
    with pytest.raises(StreamClosed):
        final.close("again")


def test_delete_and_metadata(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("delete")
    stream.create("application/json", data="[1,2]")
    meta = stream.metadata()
    assert meta.content_type == "application/json" and meta.next_offset and not meta.closed
    stream.delete()
    with pytest.raises(NotFound) as head:
        stream.metadata()
    assert "Not Found" in str(head.value)  # HEAD has no body: the reason phrase is the message
    with pytest.raises(NotFound):
        stream.delete()
    with pytest.raises(NotFound):
        list(stream.read())


def test_fork_at_an_offset(new_stream: Callable[..., Stream]) -> None:
    source = new_stream("source")
    source.create("text/plain", data="first")
    middle = source.append("second").next_offset
    source.append("third")
    fork = new_stream("fork")
    assert fork.create(forked_from=source, fork_offset=source.append("fourth").next_offset).created
    assert "".join(m.text() for m in fork.read()) == "firstsecondthirdfourth"
    early = new_stream("early-fork")
    early.create("text/plain", forked_from=source.path, fork_offset=middle)
    early.append("-own")
    assert "".join(m.text() for m in early.read()) == "firstsecond-own"
    assert "".join(m.text() for m in source.read()).endswith("fourth")


def test_stream_seq_regression_is_a_conflict(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("seq")
    stream.create("text/plain")
    stream.append("a", seq="001")
    stream.append("b", seq="002")
    with pytest.raises(Conflict):
        stream.append("c", seq="001")


def test_auth_headers_and_per_call_overrides_are_sent(base_url: str) -> None:
    session = requests.Session()
    sent: list[requests.PreparedRequest] = []
    session.hooks["response"].append(lambda response, *args, **kwargs: sent.append(response.request))
    with Client(base_url, token="secret-1", headers={"X-Team": "ops"}, session=session) as client:
        stream = client.stream(f"v1/stream/auth-{id(sent)}")
        stream.create("text/plain")
        stream.append("x", headers={"Authorization": "Bearer other"})
        list(stream.read(timeout=5))
    assert sent[0].headers["Authorization"] == "Bearer secret-1"
    assert all(request.headers["X-Team"] == "ops" for request in sent)
    assert sent[1].headers["Authorization"] == "Bearer other"
    assert sent[2].headers["Authorization"] == "Bearer secret-1"
