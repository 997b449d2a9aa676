"""A stopping server answers its live readers instead of cutting their connections.

uvicorn's graceful stop waits for open requests (up to its timeout, 5 s here), then cancels
them. A long-poll or an SSE stream waits up to its own timeout, so before, every SIGTERM (a
restart, a cluster's shard move) held the stop for 5 s and then dropped each live reader's
connection mid-response. Now the stop begins by answering them: a long-poll gets its empty
answer (204 with the offset to resume from), an SSE stream ends after a control event. With
every parser and with the fast path on or off.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from servers import ServerProcess, live_readers, metric_sum, wait_for

from durable_streams_server.cluster.shard.credential import CLUSTER_SECRET_HEADER
from durable_streams_server.settings import CLUSTER_SECRET_ENV

TEXT = {"Content-Type": "text/plain"}


@pytest.mark.parametrize(
    "variant", [(), ("--fast-path", "off"), ("--http-parser", "h11")], ids=["fast-path", "no-fast-path", "h11"]
)
def test_a_stopping_server_answers_its_long_polls_and_ends_its_sse_streams(
    server_factory: Callable[..., ServerProcess], variant: tuple[str, ...]
) -> None:
    server = server_factory(*variant, "--long-poll-timeout-ms", "60000", "--sse-reconnect-ms", "120000")
    url = server.stream_url("live")
    assert requests.put(url, headers=TEXT, timeout=10).status_code == 201
    assert requests.post(url, data=b"one", headers=TEXT, timeout=10).status_code in (200, 204)
    tail = requests.head(url, timeout=10).headers["Stream-Next-Offset"]
    answers: dict[str, object] = {}

    def long_poll() -> None:
        try:
            answer = requests.get(url, params={"offset": tail, "live": "long-poll"}, timeout=60)
            answers["long-poll"] = (answer.status_code, answer.headers.get("Stream-Next-Offset"))
        except requests.RequestException as exc:
            answers["long-poll"] = exc

    def sse() -> None:
        try:
            with requests.get(url, params={"offset": tail, "live": "sse"}, stream=True, timeout=60) as answer:
                answers["sse"] = answer.content.decode().strip().split("\n\n")
        except requests.RequestException as exc:
            answers["sse"] = exc

    readers = [threading.Thread(target=long_poll), threading.Thread(target=sse)]
    for reader in readers:
        reader.start()
    wait_for(lambda: live_readers(server.url) >= 2, interval_s=0.1)
    assert live_readers(server.url) == 2, "the readers are not waiting"

    server.stop()  # SIGTERM
    for reader in readers:
        reader.join(timeout=30)
    assert server.proc is not None and server.proc.returncode == -15, server.log_text()[-2000:]
    assert answers["long-poll"] == (204, tail), answers["long-poll"]
    events = answers["sse"]
    assert isinstance(events, list), events  # (an exception: the stream was cut)
    assert events[-1].startswith("event: control\n") and f'"streamNextOffset":"{tail}"' in events[-1], events
    assert "Exception in ASGI application" not in server.log_text()


def test_a_stopping_shard_server_answers_the_interest_wait_of_its_peers(tmp_path: Path) -> None:
    """A shard server's peers long-poll its interest (``GET /v1/internal/interest``, up to 30 s
    a wait). A drained shard server's stop waited for that request like any other, its shard
    unavailable meanwhile; it is answered at the stop now, as the long-polls are."""
    secret = "a-cluster-secret-of-enough-length-0123456789"
    shard = ["--cluster-shard", "0/1", "--cluster-router", "http://127.0.0.1:9"]
    server = ServerProcess(tmp_path / "data", shard, env={CLUSTER_SECRET_ENV: secret}).start()
    try:
        _answered_at_the_stop(server, secret)
    finally:
        server.kill()


def _answered_at_the_stop(server: ServerProcess, secret: str) -> None:
    inside = {CLUSTER_SECRET_HEADER: secret}
    interest = f"{server.url}/v1/internal/interest"
    current = requests.get(interest, headers=inside, timeout=10).json()
    answers: list[object] = []

    def wait() -> None:
        params = {"version": current["version"], "wait_ms": "30000"}
        try:
            answers.append(requests.get(interest, params=params, headers=inside, timeout=60).json())
        except requests.RequestException as exc:
            answers.append(exc)

    waiting = threading.Thread(target=wait)
    waiting.start()
    # (the wait has begun: nothing else answers it for 30 s; the scrape itself is the other request)
    wait_for(lambda: metric_sum(server.url, "durable_streams_http_requests_in_flight ") == 2)
    server.stop()  # SIGTERM
    waiting.join(timeout=60)
    assert server.proc is not None and server.proc.returncode == -15, server.log_text()[-2000:]
    assert answers == [current]
    assert "Waiting for connections to close" not in server.log_text()
