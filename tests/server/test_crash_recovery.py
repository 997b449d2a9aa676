"""Acknowledged means durable: SIGKILL the server under concurrent idempotent producers.

Eight producers append to one JSON stream, each numbering its requests with
``Producer-Seq``; half of them send bulk appends (the Arrow extension) of several
messages per request, which must land all or nothing. The server is SIGKILLed
mid-traffic and restarted on the same data, several times. A producer whose request
failed (connection refused or reset: the answer is in doubt) retries the very same
``(id, epoch, seq)`` until it gets an answer, exactly as the spec's retry model
prescribes. Afterwards the stream must hold every producer's messages exactly once and
in order, and so must the Delta table once flushed.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import requests
from deltalake import DeltaTable
from servers import ServerProcess, session, wait_for

PRODUCERS = 8
KILL_ROUNDS = 3
BULK_MESSAGES = 50
"""Messages per request of the bulk producers (the odd-numbered ones)."""
ACKS_PER_ROUND = 5
"""Requests every producer has acknowledged by each incarnation before it is killed."""


def _bulk_body(messages: list[bytes]) -> bytes:
    sink = pa.BufferOutputStream()
    batch = pa.record_batch([pa.array(messages, pa.binary())], names=["data"])
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


@dataclass
class Producer:
    index: int
    url: str
    stop: threading.Event
    acknowledged: list[int] = field(default_factory=list)
    in_doubt_retries: int = 0
    unexpected: list[str] = field(default_factory=list)

    @property
    def bulk(self) -> int:
        """Messages per request: 0 for a plain append of one message."""
        return BULK_MESSAGES if self.index % 2 else 0

    def run(self) -> None:
        http = session()
        seq = 0
        while not self.stop.is_set():
            headers = {
                "Content-Type": "application/json",
                "Producer-Id": f"producer-{self.index}",
                "Producer-Epoch": "0",
                "Producer-Seq": str(seq),
            }
            body: str | bytes = json.dumps({"p": self.index, "s": seq})
            if self.bulk:
                messages = [json.dumps({"p": self.index, "s": seq, "k": k}).encode() for k in range(self.bulk)]
                body = _bulk_body(messages)
                headers["Content-Type"] = "application/vnd.apache.arrow.stream"
                headers["Stream-Bulk-Content-Type"] = "application/json"
            try:
                response = http.post(self.url, data=body, headers=headers, timeout=10)
            except requests.RequestException:
                self.in_doubt_retries += 1
                time.sleep(0.05)  # (a backoff before the retry)
                continue  # same seq again: the server deduplicates if it was stored
            if response.status_code in (200, 204):
                self.acknowledged.append(seq)
                seq += 1
            else:
                self.unexpected.append(f"seq {seq}: {response.status_code} {response.text}")
                return


def _delta_commits(server: ServerProcess) -> int:
    return len(list((server.data_dir / "delta" / "streams" / "_delta_log").glob("*.json")))


def _wait_for_acknowledgements(producers: list[Producer], count: int) -> None:
    wanted = [len(p.acknowledged) + count for p in producers]
    wait_for(
        lambda: (
            any(p.unexpected for p in producers)
            or all(len(p.acknowledged) >= n for p, n in zip(producers, wanted, strict=True))
        ),
        timeout_s=60,
    )


def _wait_for_failures(producers: list[Producer]) -> None:
    wanted = [p.in_doubt_retries + 1 for p in producers]
    wait_for(
        lambda: (
            any(p.unexpected for p in producers)
            or all(p.in_doubt_retries >= n for p, n in zip(producers, wanted, strict=True))
        ),
        timeout_s=30,
    )


def _read_all(url: str) -> list[dict[str, int]]:
    http = session()
    messages: list[dict[str, int]] = []
    offset = "-1"
    while True:
        response = http.get(url, params={"offset": offset}, timeout=30)
        assert response.status_code == 200, response.text
        messages.extend(response.json())
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            return messages


def _assert_exactly_once_in_order(messages: list[dict[str, int]], producers: list[Producer]) -> None:
    for producer in producers:
        own = [m for m in messages if m["p"] == producer.index]
        seqs = [m["s"] for m in own if m.get("k", 0) == 0]
        assert seqs == list(range(len(seqs))), f"producer {producer.index}: duplicates, gaps or reordering"
        if producer.bulk:  # every request's messages, all of them, together, in order
            expected = [(s, k) for s in seqs for k in range(producer.bulk)]
            assert [(m["s"], m["k"]) for m in own] == expected, f"producer {producer.index}: a torn bulk append"
        # Everything acknowledged is there; at most the request in flight at the end
        # may have been stored without the producer seeing the answer.
        assert len(seqs) - len(producer.acknowledged) in (0, 1)
        assert producer.acknowledged == seqs[: len(producer.acknowledged)]


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["wal", "delta"])
def test_sigkill_under_idempotent_producers_loses_and_duplicates_nothing(
    server_factory: Callable[..., ServerProcess], durability: str
) -> None:
    server = server_factory("--durability", durability, "--flush-interval-ms", "200")
    url = server.stream_url("crash-test")
    assert session().put(url, headers={"Content-Type": "application/json"}, timeout=10).status_code == 201

    stop = threading.Event()
    producers = [Producer(i, url, stop) for i in range(PRODUCERS)]
    threads = [threading.Thread(target=p.run, daemon=True) for p in producers]
    for thread in threads:
        thread.start()
    acknowledged_before_kill = []
    for _ in range(KILL_ROUNDS):
        # Traffic first: every producer has had requests acknowledged by this incarnation,
        # which has committed to Delta at least once (conditions, not fixed pauses: a loaded
        # machine may serve few in a second); the producers keep going until the kill.
        commits = _delta_commits(server)
        _wait_for_acknowledgements(producers, ACKS_PER_ROUND)
        wait_for(lambda: _delta_commits(server) > commits, timeout_s=60)  # noqa: B023
        server.kill()
        acknowledged_before_kill.append(sum(len(p.acknowledged) for p in producers))
        # Down until every producer has seen its request fail: each retries the same seq.
        _wait_for_failures(producers)
        server.start()
    _wait_for_acknowledgements(producers, ACKS_PER_ROUND)  # the last one serves too: in-doubt requests settle
    stop.set()
    for thread in threads:
        thread.join(timeout=60)

    assert all(not p.unexpected for p in producers), [p.unexpected for p in producers]
    assert all(b > a for a, b in itertools.pairwise(acknowledged_before_kill)), (
        f"traffic must flow in every round: {acknowledged_before_kill}"
    )
    assert sum(p.in_doubt_retries for p in producers) > 0, "the kills must have interrupted requests"
    messages = _read_all(url)
    _assert_exactly_once_in_order(messages, producers)

    # A graceful stop flushes everything into Delta: the table must agree with the stream.
    server.stop()
    table = DeltaTable(str(server.data_dir / "delta" / "streams")).to_pyarrow_table()
    is_message = pc.and_(pc.equal(table["kind"], "message"), pc.equal(table["stream"], "v1/stream/crash-test"))
    rows = table.filter(is_message).sort_by("seq")
    assert rows["seq"].to_pylist() == list(range(len(messages)))
    assert [json.loads(data) for data in rows["data"].to_pylist()] == messages
