"""``Stream-Incarnation`` (extension): one opaque token per incarnation of a stream path, on HEAD,
every kind of read and bucket listings; the same across restarts, another one for a path
deleted and created again, and for a fork."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import requests
from servers import ServerProcess, session, wait_for

TEXT = {"Content-Type": "text/plain"}


def _token(response: requests.Response) -> str:
    assert response.status_code in (200, 204), response.text
    return response.headers["Stream-Incarnation"]


def _every_answer(http: requests.Session, url: str) -> set[str]:
    """The token of HEAD, a plain, multipart, Arrow, ``offset=now`` and an empty long-poll read."""
    tail = http.head(url).headers["Stream-Next-Offset"]
    answers = [
        http.head(url),
        http.get(url, params={"offset": "-1"}),
        http.get(url, params={"offset": "-1"}, headers={"Accept": "multipart/mixed"}),
        http.get(url, params={"offset": "-1"}, headers={"Accept": "application/vnd.apache.arrow.stream"}),
        http.get(url, params={"offset": "now"}),
        http.get(url, params={"offset": tail, "live": "long-poll"}),
    ]
    return {_token(answer) for answer in answers}


@pytest.mark.parametrize("durability", ["wal", "delta"])
def test_incarnation_is_stable_across_restarts_and_new_for_a_recreated_path(
    server_factory: Callable[..., ServerProcess], durability: str
) -> None:
    server = server_factory("--durability", durability, "--flush-interval-ms", "50", "--long-poll-timeout-ms", "200")
    http = session()
    url = server.stream_url
    assert http.put(url("a"), headers=TEXT, data="one").status_code == 201
    assert http.put(url("fork"), headers={**TEXT, "Stream-Forked-From": "/v1/stream/a"}).status_code == 201
    assert http.put(f"{server.url}/bucket-1").status_code == 201
    assert http.put(f"{server.url}/bucket-1/s", headers=TEXT, data="x").status_code == 201

    (first,) = _every_answer(http, url("a"))
    (fork,) = _every_answer(http, url("fork"))
    (bucketed,) = _every_answer(http, f"{server.url}/bucket-1/s")
    listing = http.get(f"{server.url}/bucket-1/streams").json()
    assert [entry["incarnation"] for entry in listing["streams"]] == [bucketed]
    assert len({first, fork, bucketed}) == 3

    server.kill()
    server.start()
    assert _every_answer(http, url("a")) == {first}
    assert _every_answer(http, url("fork")) == {fork}
    assert _every_answer(http, f"{server.url}/bucket-1/s") == {bucketed}

    assert http.delete(url("fork")).status_code == 204
    assert http.delete(url("a")).status_code == 204
    assert http.put(url("a"), headers=TEXT, data="two").status_code == 201
    (second,) = _every_answer(http, url("a"))
    assert second not in {first, fork, bucketed}

    wait_for(lambda: http.get(f"{server.url}/metrics").text.count("durable_streams_unflushed_bytes 0.0") == 1)
    server.kill()
    server.start()
    assert _every_answer(http, url("a")) == {second}
    assert http.delete(url("a")).status_code == 204
    assert http.put(url("a"), headers=TEXT).status_code == 201
    assert _every_answer(http, url("a")).isdisjoint({first, second, fork, bucketed})
