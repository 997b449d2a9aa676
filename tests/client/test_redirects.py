"""Redirects (a cluster node's 307 to the server of a stream's shard), over a scripted transport:
followed with the same method, headers and body; a target that does not answer is a moving
shard (a 503, retried), unlike a server that does not answer at all."""

from __future__ import annotations

import pytest
import requests
from fake_transport import FakeTransport, Reply

from pyspark_durable_streams.client import Backoff, Client, errors

NODE = "http://node:4437"
SHARD = "http://shard:5001"


def test_a_307_is_followed_with_the_same_method_headers_and_body() -> None:
    moved = Reply(307, {"Location": f"{SHARD}/v1/stream/s?x=1"})
    transport = FakeTransport.script(moved, Reply(204, {"Stream-Next-Offset": "0000000000000001_0000000000000000"}))
    with Client(NODE, token="secret", transport=transport) as client:
        client.stream("v1/stream/s", content_type="text/plain").append(b"payload")
    first, second = transport.requests
    assert (first.url, second.url) == (f"{NODE}/v1/stream/s", f"{SHARD}/v1/stream/s?x=1")
    assert second.params is None  # the Location carries the query
    assert (second.method, second.content) == (first.method, first.content) == ("POST", b"payload")
    assert second.headers == first.headers and second.headers["Authorization"] == "Bearer secret"
    assert first.headers["Durable-Streams-Redirects"] == "follow"


def test_a_redirect_target_that_does_not_answer_is_a_503() -> None:
    refused = requests.ConnectionError("connection refused")
    transport = FakeTransport.script(Reply(307, {"Location": f"{SHARD}/v1/stream/s"}), refused)
    no_retries = Backoff(deadline_s=0)
    with Client(NODE, transport=transport, backoff=no_retries) as client, pytest.raises(errors.ServerError) as raised:
        client.stream("v1/stream/s").metadata()
    assert (raised.value.status, raised.value.code) == (503, "REDIRECT_TARGET_UNREACHABLE")
    assert isinstance(raised.value, errors.TRANSIENT)


def test_a_lookup_whose_redirect_target_moved_on_asks_the_node_again() -> None:
    """The shard moved between the node's 307 and the request to its old server: the lookup is
    asked again (a 503 is an answer saying later) and follows the node's new redirect."""
    moved_to = "http://shard-now:5002"
    tail = Reply(200, {"Stream-Next-Offset": "0000000000000003_0000000000000000", "Content-Type": "text/plain"})
    transport = FakeTransport.script(
        Reply(307, {"Location": f"{SHARD}/v1/stream/s"}),
        requests.ConnectionError("connection refused"),
        Reply(307, {"Location": f"{moved_to}/v1/stream/s"}),
        tail,
    )
    with Client(NODE, transport=transport, backoff=Backoff(sleep=lambda _: None)) as client:
        meta = client.stream("v1/stream/s").metadata()
    assert [r.url for r in transport.requests] == [
        f"{NODE}/v1/stream/s",
        f"{SHARD}/v1/stream/s",
        f"{NODE}/v1/stream/s",
        f"{moved_to}/v1/stream/s",
    ]
    assert meta.next_offset == "0000000000000003_0000000000000000"


def test_a_server_that_does_not_answer_is_a_transport_error() -> None:
    transport = FakeTransport.script(requests.ConnectionError("connection refused"))
    with Client(NODE, transport=transport) as client, pytest.raises(errors.TransportError):
        client.stream("v1/stream/s").metadata()


def test_redirects_stop_after_five() -> None:
    loop = Reply(307, {"Location": f"{SHARD}/v1/stream/s"})
    transport = FakeTransport.script(*[loop] * 6)
    with Client(NODE, transport=transport) as client, pytest.raises(errors.TransportError, match="redirects"):
        client.stream("v1/stream/s").metadata()
    assert len(transport.requests) == 6
