"""The idempotent producer: batching, pipelining, fencing, and exactly-once across a SIGKILL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from client_support import unique
from servers import ServerProcess, wait_for

from pyspark_durable_streams.client import Backoff, Client, Producer, ProducerFenced, Stream


def test_json_messages_are_batched_acked_in_order(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("producer-json")
    stream.create("application/json")
    with Producer(stream, "p1", linger=0.01, max_batch_bytes=512, max_in_flight=4) as producer:
        futures = [producer.send_json({"i": i}) for i in range(500)]
        producer.send_json([1, 2])  # an array value stays one message
    stats = producer.stats()
    assert [m.json() for m in stream.read()] == [{"i": i} for i in range(500)] + [[1, 2]]
    assert stats.messages_acked == stats.messages_sent == 501
    assert 1 < stats.batches_acked < 501 and stats.duplicates == 0
    assert stats.last_offset == stream.metadata().next_offset
    offsets = [future.result().next_offset for future in futures]
    assert offsets == sorted(offsets)  # acks resolve in seq order


def test_byte_messages_from_many_threads(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("producer-bytes")
    stream.create("application/octet-stream")
    with Producer(stream, "threads", max_in_flight=8, max_batch_bytes=64) as producer:

        def send(thread: int) -> None:
            for i in range(50):
                producer.send(f"<{thread}:{i}>".encode())

        threads = [threading.Thread(target=send, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    data = b"".join(m.data for m in stream.read()).decode()
    for thread in range(4):  # each thread's messages once, in its own order
        mine = [item for item in data.strip("<>").split("><") if item.startswith(f"{thread}:")]
        assert mine == [f"{thread}:{i}" for i in range(50)]
    assert producer.stats().messages_acked == 200


def test_fencing_is_an_error_unless_auto_claim(new_stream: Callable[..., Stream]) -> None:
    stream = new_stream("producer-fencing")
    stream.create("application/json")
    with Producer(stream, "shared", epoch=3) as current:
        current.send_json("from epoch 3")
    zombie = Producer(stream, "shared", epoch=1)
    zombie.send_json("zombie")
    with pytest.raises(ProducerFenced) as fenced:
        zombie.close()
    assert fenced.value.current_epoch == 3

    with Producer(stream, "shared", epoch=0, auto_claim=True, max_batch_bytes=16) as claimer:
        for i in range(20):
            claimer.send_json(i)
    assert claimer.stats().epoch == 4
    assert [m.json() for m in stream.read()] == ["from epoch 3", *range(20)]


def test_a_restarted_producer_must_raise_its_epoch(new_stream: Callable[..., Stream]) -> None:
    """Same id, same epoch, seq 0 again: the server takes it for a retry (documented)."""
    stream = new_stream("producer-restart")
    stream.create("application/json")
    with Producer(stream, "job") as first:
        first.send_json("run 1")
    with Producer(stream, "job") as same_epoch:
        same_epoch.send_json("lost: looks like a retry")
    assert same_epoch.stats().duplicates == 1
    with Producer(stream, "job", epoch=1) as next_epoch:
        next_epoch.send_json("run 2")
    assert [m.json() for m in stream.read()] == ["run 1", "run 2"]


def test_ten_thousand_messages_exactly_once_across_a_sigkill(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", ["--long-poll-timeout-ms", "500"]).start()
    ended = threading.Event()
    chaos: threading.Thread | None = None
    try:
        client = Client(server.url, backoff=Backoff(deadline_s=60))
        stream = client.stream(f"v1/stream/{unique('sigkill')}")
        stream.create("application/json")
        total = 10_000
        producer = Producer(stream, "crash-test", linger=0.002, max_batch_bytes=256, max_in_flight=4)
        killed = threading.Event()

        def kill_and_restart() -> None:
            wait_for(
                lambda: producer.stats().messages_acked >= total // 3 or ended.is_set(), timeout_s=60, interval_s=0.005
            )
            if ended.is_set():
                return
            server.kill()
            killed.set()
            time.sleep(0.5)  # (the server stays down a while: time is the outage)
            server.start()

        chaos = threading.Thread(target=kill_and_restart)
        chaos.start()
        started = time.monotonic()
        for i in range(total):
            producer.send_json({"i": i})
            if i % 500 == 0:
                time.sleep(0.02)  # keep sends spread out so the kill lands mid-stream
        producer.close(timeout=120)
        chaos.join()
        stats = producer.stats()
        values = [m.json()["i"] for m in stream.read()]
        print(
            f"\nproducer across SIGKILL: {stats.messages_acked} acked in {stats.batches_acked} batches, "
            f"{stats.retries} retried requests, {stats.duplicates} deduplicated, "
            f"{time.monotonic() - started:.1f}s, server starts {server.starts}"
        )
        assert killed.is_set() and server.starts == 2
        assert stats.retries > 0  # the kill really interrupted requests
        assert values == list(range(total))
        assert stats.messages_acked == total
    finally:  # (no restart may come after the kill: the server would outlive the test)
        ended.set()
        if chaos is not None:
            chaos.join(timeout=60)
        server.kill()
