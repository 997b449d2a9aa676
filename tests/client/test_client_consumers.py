"""The client's named consumers and tombstones (``client.consumers``) against our real server,
and their absence on the reference server (a lookup there is ``None``, not an error)."""

from __future__ import annotations

import pytest
from client_support import unique
from servers import ServerProcess

from pyspark_durable_streams.client import BadRequest, Client, NotFound
from pyspark_durable_streams.client.consumers import stream_root


def _offset(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


def test_record_read_forget_a_consumer_and_look_up_a_tombstone(our_client: Client) -> None:
    name = unique("consumer-path")
    stream = our_client.stream(f"v1/stream/{name}")
    stream.create("text/plain")
    stream.append(b"one")
    stream.append(b"two")
    consumers = our_client.consumers()
    consumer = unique("client-consumer")
    recorded = consumers.record(consumer, {name: _offset(1)})
    assert recorded["streams"] == [consumers.get(consumer)["streams"][0]]
    (lag,) = [row for row in our_client.consumer_lag() if row.consumer == consumer]
    assert (lag.stream, lag.offset, lag.lag_messages, lag.lag_bytes) == (f"v1/stream/{name}", _offset(1), 1, 3)
    with pytest.raises(BadRequest):
        consumers.record(consumer, {name: _offset(9)})
    consumers.delete(consumer)
    with pytest.raises(NotFound):
        consumers.get(consumer)

    incarnation = stream.metadata().incarnation
    assert consumers.tombstone(name) is None
    stream.delete()
    tombstone = consumers.tombstone(name)
    assert tombstone is not None
    assert (tombstone.incarnation, tombstone.final_offset, tombstone.messages) == (incarnation, _offset(2), 2)


def test_a_bucket_root_and_stream_roots(our_client: Client, ours: ServerProcess) -> None:
    bucket = our_client.bucket(unique("tomb-client").lower())
    bucket.create()
    stream = bucket.stream("s")
    stream.create("text/plain")
    stream.delete()
    tombstone = our_client.consumers(bucket.bucket_id).tombstone("s")
    assert tombstone is not None and tombstone.messages == 0
    assert stream_root(f"{ours.url}/v1/stream/a/b") == (f"{ours.url}/v1/stream/", "a/b")
    assert stream_root(f"{ours.url}/bucket/s") is None


def test_no_tombstones_on_the_reference_server(reference: str) -> None:
    with Client(reference) as client:
        assert client.consumers().tombstone("never-there") is None
