"""Named consumers (``engine.consumers``): progress recorded at ``{root}__ds/consumers/{name}``,
lag at ``GET /v1/consumers`` and in ``/metrics``, durable across kill -9, validated, and cut
to what a token may read."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path

import requests
from local_engine import open_local
from security_support import bearer, new_token, write_tokens
from servers import ServerProcess

from durable_streams_server.engine.engine import EngineConfig
from durable_streams_server.engine.types import AppendRequest, CreateRequest
from durable_streams_server.http.consumers import consumer_lag_metrics
from durable_streams_server.protocol.offsets import Offset

TEXT = {"Content-Type": "text/plain"}


def _offset(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


def _fill(http: requests.Session, url: str, messages: list[bytes]) -> None:
    assert http.put(url, headers=TEXT).status_code == 201
    for message in messages:
        assert http.post(url, data=message, headers=TEXT).status_code == 204


def _lags(http: requests.Session, server: ServerProcess, **kwargs: object) -> dict[tuple[str, str], dict[str, object]]:
    answer = http.get(f"{server.url}/v1/consumers", **kwargs)  # type: ignore[arg-type]
    assert answer.status_code == 200, answer.text
    return {(row["consumer"], row["stream"]): row for row in answer.json()["consumers"]}


def _metric(text: str, name: str, consumer: str, stream: str) -> float | None:
    pattern = rf'^{name}\{{consumer="{re.escape(consumer)}",stream="{re.escape(stream)}"\}} (\S+)$'
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_consumer_lag_in_messages_bytes_and_seconds_survives_kill_9(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory()
    sizes = [b"a" * 10, b"b" * 20, b"c" * 30, b"d" * 40]
    _fill(http, server.stream_url("orders"), sizes)
    _fill(http, server.stream_url("audit"), [b"x"])
    progress = server.stream_url("__ds/consumers/etl")
    answer = http.put(progress, json={"offsets": {"orders": _offset(1), "audit": _offset(1)}})
    assert answer.status_code == 200, answer.text
    described = answer.json()
    assert described["consumer"] == "etl"
    assert {row["stream"]: row["lag_messages"] for row in described["streams"]} == {"audit": 0, "orders": 3}

    lags = _lags(http, server)
    orders = lags[("etl", "v1/stream/orders")]
    assert orders["offset"] == _offset(1)
    assert (orders["lag_messages"], orders["lag_bytes"]) == (3, 20 + 30 + 40)
    seconds = orders["lag_seconds"]
    assert isinstance(seconds, float) and seconds >= 0.0
    assert lags[("etl", "v1/stream/audit")]["lag_messages"] == 0
    assert lags[("etl", "v1/stream/audit")]["lag_seconds"] == 0.0
    metrics = http.get(f"{server.url}/metrics").text
    assert _metric(metrics, "durable_streams_consumer_lag_messages", "etl", "v1/stream/orders") == 3.0
    assert _metric(metrics, "durable_streams_consumer_lag_bytes", "etl", "v1/stream/orders") == 90.0
    assert _metric(metrics, "durable_streams_consumer_lag_seconds", "etl", "v1/stream/orders") == seconds

    # More messages raise the lag at once (computed when asked); kill -9 keeps the position.
    assert http.post(server.stream_url("orders"), data=b"e" * 50, headers=TEXT).status_code == 204
    server.kill()
    server.start()
    orders = _lags(http, server)[("etl", "v1/stream/orders")]
    assert (orders["offset"], orders["lag_messages"], orders["lag_bytes"]) == (_offset(1), 4, 140)

    # Caught up: 0 everywhere; only the named streams move (audit keeps its position).
    assert http.put(progress, json={"offsets": {"orders": _offset(5)}}).status_code == 200
    orders = _lags(http, server)[("etl", "v1/stream/orders")]
    assert (orders["lag_messages"], orders["lag_bytes"], orders["lag_seconds"]) == (0, 0, 0.0)
    assert _lags(http, server)[("etl", "v1/stream/audit")]["offset"] == _offset(1)
    metrics = http.get(f"{server.url}/metrics").text
    assert _metric(metrics, "durable_streams_consumer_lag_messages", "etl", "v1/stream/orders") == 0.0

    # A deleted stream's position is no longer reported; a deleted consumer is gone.
    assert http.delete(server.stream_url("audit")).status_code in (200, 204)
    assert ("etl", "v1/stream/audit") not in _lags(http, server)
    assert http.delete(progress).status_code == 204
    assert http.get(progress).status_code == 404
    server.kill()
    server.start()
    assert _lags(http, server) == {}


def test_bucketed_consumers_and_bad_progress(server: ServerProcess, http: requests.Session) -> None:
    assert http.put(f"{server.url}/lag-bucket").status_code == 201
    _fill(http, f"{server.url}/lag-bucket/s1", [b"1", b"22"])
    progress = f"{server.url}/lag-bucket/__ds/consumers/job-1"
    assert http.put(progress, json={"offsets": {"s1": _offset(0)}}).status_code == 200
    row = _lags(http, server)[("job-1", "lag-bucket/s1")]
    assert (row["lag_messages"], row["lag_bytes"]) == (2, 3)
    assert http.get(progress).json()["streams"][0]["stream"] == "s1"

    def refused(body: object, name: str = "job-1") -> tuple[int, str]:
        answer = http.put(f"{server.url}/lag-bucket/__ds/consumers/{name}", json=body)
        return answer.status_code, answer.json()["error"]["code"]

    assert refused({"offsets": {"s1": _offset(3)}}) == (400, "OFFSET_BEYOND_TAIL")
    assert refused({"offsets": {"nope": _offset(0)}}) == (404, "STREAM_NOT_FOUND")
    assert refused({"offsets": {"s1": "0000000000000001_0000000000000001"}}) == (400, "INVALID_OFFSET")
    assert refused({"offsets": {"s1": "soon"}}) == (400, "INVALID_OFFSET")
    assert refused({"offsets": {}}) == (400, "INVALID_CONSUMER_PROGRESS")
    assert refused([1, 2]) == (400, "INVALID_CONSUMER_PROGRESS")
    assert refused({"offsets": {"a/b": _offset(0)}}) == (400, "INVALID_STREAM_PATH")
    assert refused({"offsets": {"s1": _offset(0)}}, name="-bad") == (400, "INVALID_CONSUMER")
    assert http.post(progress, json={}).status_code == 405
    assert http.post(f"{server.url}/v1/consumers").status_code == 405


def test_consumer_lag_is_cut_to_what_the_token_may_read(
    server_factory: Callable[..., ServerProcess], http: requests.Session, tmp_path: Path
) -> None:
    tokens = {name: new_token(name) for name in ("admin", "bucket_reader", "other_reader")}
    grants = [
        {"name": "admin", "token": tokens["admin"], "scope": "admin"},
        {"name": "bucket_reader", "token": tokens["bucket_reader"], "scope": "read", "buckets": ["lag-a"]},
        {"name": "other_reader", "token": tokens["other_reader"], "scope": "read", "buckets": ["lag-b"]},
    ]
    server = server_factory("--auth-tokens-file", str(write_tokens(tmp_path / "tokens.json", grants)))
    admin = bearer(tokens["admin"])
    for bucket in ("lag-a", "lag-b"):
        assert http.put(f"{server.url}/{bucket}", headers=admin).status_code == 201
        assert http.put(f"{server.url}/{bucket}/s", headers={**admin, **TEXT}).status_code == 201
        assert http.post(f"{server.url}/{bucket}/s", data=b"m", headers={**admin, **TEXT}).status_code == 204
    progress = f"{server.url}/lag-a/__ds/consumers/reader"
    body = {"offsets": {"s": _offset(0)}}
    assert http.put(progress, json=body).status_code == 401
    assert http.put(progress, json=body, headers=bearer(tokens["other_reader"])).status_code == 403
    assert http.put(progress, json=body, headers=bearer(tokens["bucket_reader"])).status_code == 200  # read suffices
    assert http.put(f"{server.url}/lag-b/__ds/consumers/reader", json=body, headers=admin).status_code == 200
    assert http.get(f"{server.url}/v1/consumers").status_code == 401
    assert set(_lags(http, server, headers=bearer(tokens["bucket_reader"]))) == {("reader", "lag-a/s")}
    assert set(_lags(http, server, headers=bearer(tokens["other_reader"]))) == {("reader", "lag-b/s")}
    assert set(_lags(http, server, headers=admin)) == {("reader", "lag-a/s"), ("reader", "lag-b/s")}


def test_lag_of_a_position_the_memory_tail_no_longer_holds(tmp_path: Path) -> None:
    """Recorded where the stream's messages after it are only in Delta, a position's byte count
    and read time are unknown: the lag in bytes is the lag in messages times the mean message
    size, the lag in seconds unknown (``None``; no gauge)."""

    async def scenario() -> None:
        storage, engine = await open_local(tmp_path, engine_config=EngineConfig(tail_cache_bytes=0))
        try:
            name = "v1/stream/evicted"
            await engine.create(CreateRequest(name, "text/plain", None, None, None, False, b""))
            for size in (10, 20, 30, 40):
                await engine.append(name, AppendRequest(b"x" * size, None, None, None, False))
            stream = engine.streams[name]
            deadline = time.monotonic() + 30
            while stream.mem_base < stream.tail:  # flushed, and let go (no flushed bytes are kept)
                assert time.monotonic() < deadline, "the memory tail kept its messages"
                await asyncio.sleep(0.02)
            await engine.consumers.record("v1/stream/", "cold", {"evicted": Offset(1)})
            (lag,) = engine.consumers.lags()
            assert (lag.messages, lag.bytes, lag.seconds) == (3, 3 * 100 // 4, None)
            exported = {metric.name: metric.samples for metric in consumer_lag_metrics(engine.consumers)}
            assert [sample.value for sample in exported["durable_streams_consumer_lag_messages"]] == [3]
            assert exported["durable_streams_consumer_lag_seconds"] == []
        finally:
            await storage.close()

    asyncio.run(scenario())


def test_a_scrape_leaves_sleeping_streams_asleep(tmp_path: Path) -> None:
    """The lag of a stream that went back to sleep (``engine.idle``) is computed from its kept
    state: the scrape builds no ``Stream``."""

    class Clock:
        ms = int(time.time() * 1000)

        def __call__(self) -> int:
            return self.ms

    async def scenario() -> None:
        clock = Clock()
        config = EngineConfig(idle_stream_ms=60_000)
        storage, engine = await open_local(tmp_path, engine_config=config, clock=clock)
        try:
            name = "v1/stream/sleepy"
            await engine.create(CreateRequest(name, "text/plain", None, None, None, False, b""))
            for size in (5, 6, 7):
                await engine.append(name, AppendRequest(b"z" * size, None, None, None, False))
            await engine.consumers.record("v1/stream/", "nightly", {"sleepy": Offset(1)})
            stream = engine.streams[name]
            uid = stream.uid
            deadline = time.monotonic() + 30
            while stream.flushed_tail < stream.tail:
                assert time.monotonic() < deadline, "not flushed"
                await asyncio.sleep(0.02)
            del stream
            engine.idle.step_s = 60.0
            clock.ms += 60_000
            assert engine.idle.step() == 1 and engine.live.index.built(uid) is None  # asleep
            (lag,) = engine.consumers.lags()
            assert (lag.stream, lag.messages, lag.bytes) == (name, 2, 13)
            assert engine.live.index.built(uid) is None  # still asleep
        finally:
            await storage.close()

    asyncio.run(scenario())


def test_a_record_keeps_only_positions_of_streams_that_still_exist(tmp_path: Path) -> None:
    """A consumer of short-lived streams does not grow with every stream it ever read: each
    record drops the positions of streams deleted (or re-created) since."""

    async def scenario() -> None:
        storage, engine = await open_local(tmp_path)
        try:
            names = [f"v1/stream/session-{n}" for n in range(3)]
            for name in names:
                await engine.create(CreateRequest(name, "text/plain", None, None, None, False, b"x"))
            paths = {name.removeprefix("v1/stream/"): Offset(1) for name in names}
            await engine.consumers.record("v1/stream/", "sessions", paths)
            await engine.delete(names[0])
            await engine.delete(names[1])
            await engine.create(CreateRequest(names[1], "text/plain", None, None, None, False, b"y"))  # again
            consumer = await engine.consumers.record("v1/stream/", "sessions", {"session-2": Offset(1)})
            assert sorted(consumer.positions) == ["session-2"]
        finally:
            await storage.close()
        storage, engine = await open_local(tmp_path)  # as recorded
        try:
            assert sorted(engine.consumers.get("v1/stream/", "sessions").positions) == ["session-2"]
        finally:
            await storage.close()

    asyncio.run(scenario())
