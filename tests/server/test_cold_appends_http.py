"""Appends to sleeping streams over real HTTP (``engine.cold_appends``): stored without building the
stream, read at once though not yet in Delta, and what was acknowledged is there after a kill -9
(the WAL's records are those of any append); once in Delta, kept with the stream's cached tail
for reads (``engine.asleep_tails``). A server subprocess on a real Delta table; its streams
asleep because a restart leaves them so."""

from __future__ import annotations

from collections.abc import Callable

from servers import ServerProcess, metric_sum, read_all, session, wait_for

from durable_streams_server.engine.asleep_tails import ENTRY_BYTES
from durable_streams_server.protocol.offsets import parse_offset

TEXT = {"Content-Type": "text/plain"}
JSON = {"Content-Type": "application/json"}
NO_FLUSH = ("--flush-interval-ms", "3600000", "--compaction-interval-s", "0")


def test_appends_to_sleeping_streams_are_read_at_once_and_outlive_a_kill(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory(*NO_FLUSH)
    http = session()
    names = [f"sleeper-{index}" for index in range(3)]
    for name in names:
        assert http.put(server.stream_url(name), headers=TEXT, data=f"{name}:".encode()).status_code == 201
    assert http.put(server.stream_url("doc"), headers=JSON, data=b'[{"n":0}]').status_code == 201
    server.restart()  # (a graceful stop flushes; after the start every stream is asleep)
    assert metric_sum(server.url, "durable_streams_streams_dormant") == 4

    for name in names:
        assert http.post(server.stream_url(name), headers=TEXT, data=b"one").status_code == 204
    assert http.post(server.stream_url("doc"), headers=JSON, data=b'[{"n":1},{"n":2}]').status_code == 204
    assert metric_sum(server.url, "durable_streams_cold_appends_total") == 4
    assert metric_sum(server.url, "durable_streams_streams_dormant") == 4  # none was built
    assert metric_sum(server.url, "durable_streams_unflushed_bytes") > 0  # (nothing in Delta yet)

    assert read_all(http, server.stream_url(names[0])) == b"sleeper-0:one"  # from memory: built by the read
    assert http.get(server.stream_url("doc"), params={"offset": "-1"}).json() == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert metric_sum(server.url, "durable_streams_streams_dormant") == 2
    assert http.post(server.stream_url(names[1]), headers=TEXT, data=b",two").status_code == 204

    server.kill()  # no final flush: the WAL holds what was acknowledged
    server.start()
    assert [read_all(http, server.stream_url(name)) for name in names] == [
        b"sleeper-0:one",
        b"sleeper-1:one,two",
        b"sleeper-2:one",
    ]
    tails = [parse_offset(http.head(server.stream_url(name)).headers["Stream-Next-Offset"]).seq for name in names]
    assert tails == [2, 3, 2]


def test_refused_appends_to_sleeping_streams_answer_as_before(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*NO_FLUSH)
    http = session()
    assert http.put(server.stream_url("typed"), headers=TEXT, data=b"x").status_code == 201
    assert http.put(server.stream_url("doc"), headers=JSON, data=b"[1]").status_code == 201
    server.restart()
    mismatch = http.post(server.stream_url("typed"), headers=JSON, data=b"[2]")
    assert mismatch.status_code == 409 and mismatch.json()["error"]["code"] == "CONTENT_TYPE_MISMATCH"
    broken = http.post(server.stream_url("doc"), headers=JSON, data=b"{nope")
    assert broken.status_code == 400
    missing = http.post(server.stream_url("nobody"), headers=TEXT, data=b"x")
    assert missing.status_code == 404
    assert metric_sum(server.url, "durable_streams_cold_appends_total") == 0
    assert read_all(http, server.stream_url("typed")) == b"x"
    assert http.get(server.stream_url("doc"), params={"offset": "-1"}).json() == [1]


def test_an_append_to_a_sleeping_stream_wakes_its_subscribers(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory("--idle-stream-s", "1")
    http = session()
    assert http.put(server.stream_url("wake"), headers=JSON, data=b"[]").status_code == 201
    assert http.put(server.stream_url("jobs/1"), headers=JSON, data=b"[1]").status_code == 201
    subscription = {"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "wake", "lease_ttl_ms": 60_000}
    assert http.put(server.stream_url("__ds/subscriptions/p"), json=subscription).status_code == 201
    server.restart()  # (jobs/1 linked at its tail: nothing pending)
    assert http.get(server.stream_url("wake"), params={"offset": "-1"}).json() == []
    wait_for(lambda: metric_sum(server.url, "durable_streams_streams_dormant") == 2)  # (both unused for a second)
    assert http.post(server.stream_url("jobs/1"), headers=JSON, data=b"[2]").status_code == 204
    assert metric_sum(server.url, "durable_streams_cold_appends_total") == 1
    wait_for(lambda: http.get(server.stream_url("wake"), params={"offset": "-1"}).json() != [])
    events = http.get(server.stream_url("wake"), params={"offset": "-1"}).json()
    assert [(event["type"], event["subscription_id"], event["stream"]) for event in events] == [("wake", "p", "jobs/1")]


def test_sleeping_streams_keep_their_cached_tails_for_reads(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory("--idle-stream-s", "1")
    http = session()
    assert http.put(server.stream_url("text"), headers=TEXT, data=b"hello").status_code == 201
    assert http.put(server.stream_url("doc"), headers=JSON, data=b'[{"n":0},{"n":1}]').status_code == 201
    wait_for(lambda: metric_sum(server.url, "durable_streams_streams_dormant") == 2)  # (unused for a second)
    entry = ENTRY_BYTES
    assert metric_sum(server.url, "durable_streams_asleep_tail_bytes") == len(b'hello{"n":0}{"n":1}') + 2 * entry
    assert http.post(server.stream_url("text"), headers=TEXT, data=b" world").status_code == 204
    assert metric_sum(server.url, "durable_streams_cold_appends_total") == 1
    # (once in Delta, the record continues the tail the stream keeps asleep)
    wait_for(
        lambda: (
            metric_sum(server.url, "durable_streams_asleep_tail_bytes") == len(b'hello world{"n":0}{"n":1}') + 2 * entry
        )
    )
    assert read_all(http, server.stream_url("text")) == b"hello world"  # (built: the tail back in it)
    assert http.get(server.stream_url("doc"), params={"offset": "-1"}).json() == [{"n": 0}, {"n": 1}]
    assert metric_sum(server.url, "durable_streams_asleep_tail_bytes") == 0
    wait_for(lambda: metric_sum(server.url, "durable_streams_streams_dormant") == 2)  # (and asleep again, with it)
    assert metric_sum(server.url, "durable_streams_asleep_tail_bytes") == len(b'hello world{"n":0}{"n":1}') + 2 * entry
