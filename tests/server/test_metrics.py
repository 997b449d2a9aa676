"""Observability of a real server: ``/metrics`` scraped before and after real traffic, a
Delta flush and a compaction pass (parsed with prometheus_client's own parser), the
``/healthz`` and ``/readyz`` probes (readiness dropping while the WAL is over its cap and
coming back after the flush), the probe names reserved against buckets, and JSON logs.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from security_support import bearer, new_token, write_tokens
from servers import ServerProcess, session, wait_for
from wal_support import records_on_disk

TEXT = {"Content-Type": "text/plain"}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: ServerProcess) -> Samples:
    response = session().get(f"{server.url}/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain"), response.headers
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def requests_total(samples: Samples, route: str, method: str, status: int) -> float:
    return value(samples, "durable_streams_http_requests_total", route=route, method=method, status=str(status))


@pytest.fixture
def http() -> Iterator[requests.Session]:
    with session() as s:
        yield s


def test_metrics_move_with_traffic_flushes_and_compactions(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory(
        "--flush-interval-ms", "100", "--compaction-interval-s", "1", "--long-poll-timeout-ms", "1500"
    )
    before = scrape(server)
    assert value(before, "durable_streams_streams") == 0
    assert value(before, "durable_streams_storage_degraded") == 0

    url = server.stream_url("metered")
    assert http.put(url, headers=TEXT).status_code == 201
    for body in (b"one", b"two", b"three"):
        assert http.post(url, headers=TEXT, data=body).status_code == 204
    assert http.get(url, params={"offset": "-1"}).content == b"onetwothree"
    tail = http.head(url).headers["Stream-Next-Offset"]
    assert http.get(server.stream_url("missing")).status_code == 404
    assert http.get(f"{server.url}/no/route/has/five/segments").status_code == 404

    answers: list[int] = []
    poll = threading.Thread(
        target=lambda: answers.append(session().get(url, params={"offset": tail, "live": "long-poll"}).status_code)
    )
    poll.start()  # (parked 1.5 s: scrapes every 50 ms see it even while a compaction slows them)
    wait_for(lambda: value(scrape(server), "durable_streams_live_readers", mode="long_poll") == 1)
    during = scrape(server)
    assert value(during, "durable_streams_http_requests_in_flight") >= 2  # the poll and this scrape
    poll.join(timeout=30)
    assert answers == [204]

    def flushed_and_compacted() -> bool:
        now = scrape(server)
        return (
            value(now, "durable_streams_delta_commit_duration_seconds_count")
            > value(before, "durable_streams_delta_commit_duration_seconds_count")
            and value(now, "durable_streams_compaction_duration_seconds_count")
            > value(before, "durable_streams_compaction_duration_seconds_count")
            and value(now, "durable_streams_unflushed_bytes") == 0
        )

    wait_for(flushed_and_compacted, timeout_s=60, interval_s=0.2)
    after = scrape(server)

    def moved(route: str, method: str, status: int) -> float:
        return requests_total(after, route, method, status) - requests_total(before, route, method, status)

    assert moved("base_stream", "PUT", 201) == 1
    assert moved("base_stream", "POST", 204) == 3
    assert moved("base_stream", "GET", 200) == 1
    assert moved("base_stream", "HEAD", 200) == 1
    assert moved("base_stream", "GET", 404) == 1
    assert moved("unrouted", "GET", 404) == 1
    assert moved("long_poll", "GET", 204) == 1
    assert moved("metrics", "GET", 200) >= 3
    for route, count in (("base_stream", 7), ("long_poll", 1)):
        name = "durable_streams_http_request_duration_seconds_count"
        assert value(after, name, route=route) - value(before, name, route=route) == count
    assert value(after, "durable_streams_http_request_duration_seconds_sum", route="long_poll") > 0
    assert value(after, "durable_streams_streams") == 1
    assert value(after, "durable_streams_last_lsn") - value(before, "durable_streams_last_lsn") == 4
    assert value(after, "durable_streams_live_readers", mode="long_poll") == 0
    assert value(after, "durable_streams_delta_commit_failures_total") == 0
    assert value(after, "durable_streams_flush_lag_seconds") == 0
    assert value(after, "process_resident_memory_bytes") > 0


def test_wal_bytes_is_the_wal_on_disk(server_factory: Callable[..., ServerProcess], http: requests.Session) -> None:
    server = server_factory("--flush-interval-ms", "600000")  # nothing is flushed (and truncated) meanwhile
    url = server.stream_url("wal-metered")
    assert http.put(url, headers=TEXT).status_code == 201
    assert http.post(url, headers=TEXT, data=b"x" * 10_000).status_code == 204
    wal_on_disk = records_on_disk(server.data_dir / "wal")  # (not the preallocated zeros after them)
    assert wal_on_disk > 10_000
    assert value(scrape(server), "durable_streams_wal_bytes") == wal_on_disk


def test_healthz_and_readyz(server_factory: Callable[..., ServerProcess], http: requests.Session) -> None:
    server = server_factory()
    health = http.get(f"{server.url}/healthz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    ready = http.get(f"{server.url}/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
    assert http.head(f"{server.url}/readyz").status_code == 200
    refused = http.post(f"{server.url}/healthz")
    assert refused.status_code == 405
    assert refused.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


def test_readyz_is_503_while_storage_is_degraded(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    """A WAL over --max-wal-bytes (here: the flush is seconds away) is a real degraded
    state: writes get 503 and readiness says why, until the flush empties the WAL."""
    server = server_factory("--max-wal-bytes", "4096", "--flush-interval-ms", "3000")
    url = server.stream_url("degraded")
    assert http.put(url, headers=TEXT).status_code == 201
    seen = None
    for _ in range(100):  # a flush can fall between a refusal and the probe: then again
        response = http.post(url, headers=TEXT, data=b"x" * 8192)
        if response.status_code != 503:
            assert response.status_code == 204, response.text
            continue
        assert response.json()["error"]["code"] == "WAL_FULL"
        ready, samples = http.get(f"{server.url}/readyz"), scrape(server)
        if ready.status_code == 503 and value(samples, "durable_streams_storage_degraded") == 1:
            seen = ready
            break
    assert seen is not None, "storage never reported itself degraded"
    error = seen.json()["error"]
    assert error["code"] == "NOT_READY" and "WAL" in error["message"], error
    assert int(seen.headers["Retry-After"]) >= 1
    wait_for(lambda: http.get(f"{server.url}/readyz").status_code == 200, timeout_s=30, interval_s=0.2)
    assert value(scrape(server), "durable_streams_storage_degraded") == 0
    assert http.post(url, headers=TEXT, data=b"y").status_code == 204


def test_probe_names_are_not_bucket_ids(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory()
    http = session()
    for name in ("healthz", "readyz", "metrics"):
        assert http.get(f"{server.url}/{name}").status_code == 200
        own = http.put(f"{server.url}/{name}")  # the server's route, not a bucket to create
        assert (own.status_code, own.json()["error"]["code"]) == (405, "METHOD_NOT_ALLOWED")
        for method, path in (("PUT", f"/{name}/s"), ("GET", f"/{name}/streams"), ("GET", f"/{name}/s/snapshot")):
            response = http.request(method, f"{server.url}{path}")
            assert response.status_code == 400, (method, path, response.text)
            error = response.json()["error"]
            assert error["code"] == "INVALID_BUCKET_ID" and "reserved" in error["message"], error


def test_json_logs_are_json_and_carry_no_tokens(
    server_factory: Callable[..., ServerProcess], tmp_path: Path, http: requests.Session
) -> None:
    token, wrong = new_token("logged"), new_token("wrong")
    tokens_file = write_tokens(tmp_path / "tokens.json", [{"name": "logger", "token": token, "scope": "admin"}])
    server = server_factory(
        "--auth-tokens-file", str(tokens_file), "--log-format", "json", "--access-log", "--log-level", "debug"
    )
    url = server.stream_url(f"logged-{uuid.uuid4().hex}")
    assert http.put(url, headers={**TEXT, **bearer(token)}).status_code == 201
    assert http.post(url, headers={**TEXT, **bearer(token)}, data=b"hello").status_code == 204
    assert http.get(url, headers=bearer(wrong)).status_code == 401
    assert http.get(f"{url}?offset=%ff", headers=bearer(token)).status_code == 400
    assert http.get(f"{server.url}/metrics", headers=bearer(token)).status_code == 200
    server.stop()

    lines = [line for line in server.log_text().splitlines() if line.strip() and not line.startswith("--- start")]
    events = []
    for line in lines:
        event = json.loads(line)  # every line, also uvicorn's and the access log's
        assert isinstance(event, dict) and {"ts", "level", "logger", "msg"} <= set(event), line
        events.append(event)
    messages = [event["msg"] for event in events]
    assert "ready" in messages and "stopped" in messages, messages
    assert any("POST /v1/stream/" in message for message in messages), "the access log is missing"
    text = server.log_text()
    assert token not in text and wrong not in text


def test_streams_unused_go_to_sleep_and_come_back_on_use(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory("--flush-interval-ms", "100", "--idle-stream-s", "2")  # (2 s: used again, they stay)
    urls = [server.stream_url(f"sleeper-{index}") for index in range(3)]
    for index, url in enumerate(urls):
        assert http.put(url, headers=TEXT, data=f"m{index}".encode()).status_code == 201
    assert value(scrape(server), "durable_streams_streams_dormant") == 0
    wait_for(lambda: value(scrape(server), "durable_streams_streams_dormant") == 3, timeout_s=30)
    assert value(scrape(server), "durable_streams_streams") == 3
    assert http.get(urls[1], params={"offset": "-1"}).content == b"m1"  # (from Delta now)
    assert value(scrape(server), "durable_streams_streams_dormant") == 2
    assert http.post(urls[2], headers=TEXT, data=b"+").status_code == 204
    assert http.get(urls[2], params={"offset": "-1"}).content == b"m2+"
    assert value(scrape(server), "durable_streams_streams_dormant") == 1
