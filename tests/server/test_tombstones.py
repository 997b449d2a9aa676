"""Deleted streams' tombstones (``engine.tombstones``): the final offset and incarnation of a
removed stream, looked up at ``{root}__ds/tombstones/{path}``, durable across kill -9, bounded
in time (``--tombstone-retention-s``) and in number."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import requests
from local_engine import open_local
from servers import ServerProcess, wait_for

from durable_streams_server.engine.engine import EngineConfig
from durable_streams_server.engine.types import AppendRequest, CreateRequest

TEXT = {"Content-Type": "text/plain"}


def _tombstone(http: requests.Session, server: ServerProcess, root: str, path: str) -> requests.Response:
    return http.get(f"{server.url}/{root}__ds/tombstones/{path}")


def _stream_with(http: requests.Session, url: str, count: int) -> str:
    assert http.put(url, headers=TEXT).status_code == 201
    for i in range(count):
        assert http.post(url, data=f"m{i}".encode(), headers=TEXT).status_code == 204
    incarnation = http.head(url).headers["Stream-Incarnation"]
    return incarnation


def test_a_deleted_streams_end_is_kept_across_kill_9(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory()
    base = server.stream_url("sessions/one")
    base_incarnation = _stream_with(http, base, 3)
    assert http.put(f"{server.url}/tomb-bucket", headers={}).status_code == 201
    bucketed = f"{server.url}/tomb-bucket/s1"
    bucket_incarnation = _stream_with(http, bucketed, 2)
    assert _tombstone(http, server, "v1/stream/", "sessions/one").status_code == 404  # alive: none
    assert http.delete(base).status_code in (200, 204)
    assert http.delete(bucketed).status_code in (200, 204)

    server.kill()
    server.start()
    found = _tombstone(http, server, "v1/stream/", "sessions/one")
    assert found.status_code == 200
    body = found.json()
    assert body["stream"] == "sessions/one"
    assert body["incarnation"] == base_incarnation
    assert body["final_offset"] == "0000000000000003_0000000000000000" and body["messages"] == 3
    assert body["deleted_at_ms"] <= int(time.time() * 1000)
    in_bucket = _tombstone(http, server, "tomb-bucket/", "s1").json()
    assert (in_bucket["incarnation"], in_bucket["messages"]) == (bucket_incarnation, 2)
    assert http.head(base).status_code == 404  # the stream itself stays gone

    # Re-created and deleted again: the newest incarnation's end replaces the old one.
    again = _stream_with(http, base, 1)
    assert again != base_incarnation
    assert http.delete(base).status_code in (200, 204)
    body = _tombstone(http, server, "v1/stream/", "sessions/one").json()
    assert (body["incarnation"], body["messages"]) == (again, 1)
    metrics = http.get(f"{server.url}/metrics").text
    assert "durable_streams_tombstones 2.0" in metrics


def test_tombstone_lookups_answer_errors_as_json(server: ServerProcess, http: requests.Session) -> None:
    missing = _tombstone(http, server, "v1/stream/", "never/there")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "TOMBSTONE_NOT_FOUND"
    refused = http.delete(f"{server.url}/v1/stream/__ds/tombstones/x")
    assert refused.status_code == 405 and "error" in refused.json()
    bad = _tombstone(http, server, "v1/stream/", "a//b")
    assert bad.status_code == 400 and "error" in bad.json()


def test_tombstones_expire_after_the_retention(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory("--tombstone-retention-s", "1")
    url = server.stream_url("short-lived")
    _stream_with(http, url, 1)
    assert http.delete(url).status_code in (200, 204)
    assert _tombstone(http, server, "v1/stream/", "short-lived").status_code == 200
    wait_for(lambda: _tombstone(http, server, "v1/stream/", "short-lived").status_code == 404, timeout_s=30)
    server.kill()
    server.start()  # the expiry was recorded: it does not come back
    assert _tombstone(http, server, "v1/stream/", "short-lived").status_code == 404


def test_at_most_max_tombstones_are_kept_oldest_first(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage, engine = await open_local(tmp_path, engine_config=EngineConfig(max_tombstones=3))
        try:
            for i in range(5):
                name = f"v1/stream/s{i}"
                await engine.create(CreateRequest(name, "text/plain", None, None, None, False, b"x" * i))
                await engine.append(name, AppendRequest(b"y", None, None, None, False))
                await engine.delete(name)
            assert len(engine.tombstones) == 3
            assert [engine.tombstones.lookup(f"v1/stream/s{i}") is None for i in range(5)] == [
                True,
                True,
                False,
                False,
                False,
            ]
            kept = engine.tombstones.lookup("v1/stream/s4")
            assert kept is not None and kept.messages == 2  # the create's body and one append
        finally:
            await storage.close()
        storage, engine = await open_local(tmp_path, engine_config=EngineConfig(max_tombstones=3))
        try:  # the evictions were recorded too
            assert sorted(t for t in (f"v1/stream/s{i}" for i in range(5)) if engine.tombstones.lookup(t)) == [
                "v1/stream/s2",
                "v1/stream/s3",
                "v1/stream/s4",
            ]
        finally:
            await storage.close()

    asyncio.run(scenario())


def test_expired_and_soft_deleted_streams_leave_tombstones(server: ServerProcess, http: requests.Session) -> None:
    ttl = server.stream_url("expiring")
    assert http.put(ttl, headers={**TEXT, "Stream-TTL": "1"}).status_code == 201
    assert http.post(ttl, data=b"once", headers=TEXT).status_code == 204
    wait_for(lambda: http.head(ttl).status_code == 404, timeout_s=30)  # expired (looked at on access)
    assert _tombstone(http, server, "v1/stream/", "expiring").json()["messages"] == 1

    source, fork = server.stream_url("fork-source"), server.stream_url("fork-child")
    _stream_with(http, source, 2)
    assert http.put(fork, headers={**TEXT, "Stream-Forked-From": "/v1/stream/fork-source"}).status_code == 201
    assert http.post(fork, data=b"own", headers=TEXT).status_code == 204
    assert http.delete(source).status_code in (200, 204)  # soft-deleted: its forks still read it
    assert _tombstone(http, server, "v1/stream/", "fork-source").status_code == 404
    assert http.delete(fork).status_code in (200, 204)  # the last fork: both go
    assert _tombstone(http, server, "v1/stream/", "fork-child").json()["messages"] == 3
    assert _tombstone(http, server, "v1/stream/", "fork-source").json()["messages"] == 2
