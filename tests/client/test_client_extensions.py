"""Buckets, snapshots, bootstrap and 410 recovery: our server's protocol extensions."""

from __future__ import annotations

import pytest
from client_support import later, unique

from pyspark_durable_streams.client import BadRequest, Client, Conflict, Gone, NotFound, Snapshot


def test_bucket_lifecycle_and_paginated_listing(our_client: Client) -> None:
    bucket = our_client.bucket(unique("bkt"))
    assert bucket.create() is True
    assert bucket.create(exist_ok=True) is False
    with pytest.raises(Conflict):
        bucket.create()
    names = ["user-1", "user-2", "user-3", "user 4 é", "zeta"]
    for name in names:
        bucket.stream(name).create("text/plain")
    assert bucket.info().streams == 5
    listed = list(bucket.streams(page_size=2))
    assert [info.stream_id for info in listed] == sorted(names)
    assert all(info.status == "Open" and info.content_type == "text/plain" for info in listed)
    assert [info.stream_id for info in bucket.streams("user-", page_size=1)] == ["user-1", "user-2", "user-3"]
    assert [info.stream_id for info in bucket.streams(after="user-2")] == ["user-3", "zeta"]
    with pytest.raises(Conflict):  # not empty
        bucket.delete()
    for name in names:
        bucket.stream(name).delete()
    bucket.delete()
    with pytest.raises(NotFound):
        bucket.info()
    with pytest.raises(ValueError):
        our_client.bucket("UPPER")


def test_snapshots_publish_read_and_retention(our_client: Client) -> None:
    stream = our_client.stream(f"v1/stream/{unique('snap')}")
    stream.create("application/json")
    stream.append_json_batch([1, 2, 3])
    middle = stream.metadata().next_offset
    stream.append_json(4)
    assert stream.snapshots.latest() is None
    stream.snapshots.publish(middle, b'{"sum":6}', content_type="application/json")
    latest = stream.snapshots.latest()
    assert latest is not None
    assert (latest.offset, latest.content_type, latest.data) == (middle, "application/json", b'{"sum":6}')
    assert stream.snapshots.get(middle) == latest
    assert stream.metadata().snapshot_offset == middle
    with pytest.raises(Conflict):  # the latest snapshot keeps /bootstrap complete
        stream.snapshots.delete(middle)
    with pytest.raises(Gone):  # retention moved to the snapshot
        list(stream.read("-1"))
    assert [m.json() for m in stream.read(middle)] == [4]
    with pytest.raises(BadRequest):
        stream.snapshots.publish("not an offset", b"")


def test_bootstrap_with_and_without_a_snapshot(our_client: Client) -> None:
    stream = our_client.stream(f"v1/stream/{unique('boot')}")
    stream.create("application/octet-stream")
    stream.append(b"a")
    stream.append(b"\r\n--b")
    with stream.bootstrap() as boot:
        assert boot.snapshot is None
        messages = list(boot.messages)
    assert [m.data for m in messages] == [b"a", b"\r\n--b"]
    assert messages[-1].next_offset == boot.next_offset == stream.metadata().next_offset
    stream.snapshots.publish(boot.next_offset, b"state-ab")
    stream.append(b"c")
    with stream.bootstrap() as boot:
        assert boot.snapshot is not None and boot.snapshot.data == b"state-ab"
        assert [m.data for m in boot.messages] == [b"c"]
        assert boot.up_to_date


def test_follow_rebuilds_from_bootstrap_after_gone_and_keeps_tailing(our_client: Client) -> None:
    stream = our_client.stream(f"v1/stream/{unique('follow')}")
    stream.create("application/json")
    stream.append_json_batch(["a", "b"])
    stream.snapshots.publish(stream.metadata().next_offset, b'["a","b"]', content_type="application/json")
    stream.append_json("c")
    snapshots: list[Snapshot | None] = []
    later(0.5, lambda: stream.append_json("d"))
    later(0.8, stream.close)
    seen = [m.json() for m in stream.follow("-1", on_snapshot=snapshots.append, live="long-poll")]
    assert [s.data if s else None for s in snapshots] == [b'["a","b"]']
    assert seen == ["c", "d"]
