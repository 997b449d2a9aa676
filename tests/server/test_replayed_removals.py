"""Removals replayed from the WAL do what the live requests did, on state loaded from Delta.

The streams and buckets are created and flushed into Delta first (a clean stop); the
removals then exist only in the WAL when the server is killed. Recovery replays them on
top of the Delta state: the bucket listing must drop the removed stream (a stale entry
made listing the bucket spin, hanging the server), and the deleted bucket must stay
deleted after the replayed removal is flushed and the server restarts again (the replay
has to leave the tombstone the live delete left).
"""

from __future__ import annotations

from collections.abc import Callable

import requests
from servers import ServerProcess, session

TEXT = {"Content-Type": "text/plain"}


def _listing(http: requests.Session, url: str, bucket_id: str) -> list[str]:
    response = http.get(f"{url}/{bucket_id}/streams", timeout=10)  # (a stale listing used to spin)
    assert response.status_code == 200, response.text
    return [entry["stream_id"] for entry in response.json()["streams"]]


def test_replayed_removals_on_flushed_state(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory("--flush-interval-ms", "50")
    http = session()
    url = server.url
    for bucket_id in ("kept", "doomed"):
        assert http.put(f"{url}/{bucket_id}").status_code == 201
    for name in ("kept/a", "kept/b", "doomed/c"):
        assert http.put(f"{url}/{name}", headers=TEXT, data=name).status_code == 201
    server.stop()  # a clean stop flushes everything into Delta

    server.extra_args = ("--flush-interval-ms", "600000")
    server.start()
    assert _listing(http, url, "kept") == ["a", "b"]
    assert http.delete(f"{url}/kept/a").status_code == 204
    assert http.delete(f"{url}/doomed/c").status_code == 204
    assert http.delete(f"{url}/doomed").status_code == 204
    server.kill()  # the removals exist only in the WAL

    server.start()
    assert _listing(http, url, "kept") == ["b"]
    assert http.get(f"{url}/kept").json()["streams"] == 1
    assert http.get(f"{url}/kept/a").status_code == 404
    assert http.get(f"{url}/doomed").status_code == 404
    server.stop()  # flushes the replayed removals

    server.start()
    assert _listing(http, url, "kept") == ["b"]
    assert http.get(f"{url}/kept/b").text == "kept/b"
    assert http.get(f"{url}/doomed").status_code == 404
    assert http.get(f"{url}/doomed/c").status_code == 404
    assert http.delete(f"{url}/kept/b").status_code == 204
    assert http.delete(f"{url}/kept").status_code == 204  # empty now: nothing left listed
