"""Everything besides data survives SIGKILL too: closure, producer epochs and sequence
numbers, Stream-Seq, TTL configuration, forks and soft deletes.

Each scenario runs twice: killed while the state exists only in the WAL, and killed after
it was flushed into Delta (when the WAL segments it came from have been deleted).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import requests
from servers import ServerProcess, session, settled_wal_segments, wait_until_wal_flushed, wal_segments

TEXT = {"Content-Type": "text/plain"}


def _producer(pid: str, epoch: int, seq: int) -> dict[str, str]:
    return {**TEXT, "Producer-Id": pid, "Producer-Epoch": str(epoch), "Producer-Seq": str(seq)}


def _build_state(http: requests.Session, server: ServerProcess) -> None:
    url = server.stream_url
    assert http.put(url("closed"), headers=TEXT, data="a").status_code == 201
    assert http.post(url("closed"), headers=_producer("p", 0, 0), data="b").status_code == 200
    assert http.post(url("closed"), headers={"Stream-Closed": "true", **_producer("p", 0, 1)}).status_code == 204

    assert http.put(url("fenced"), headers=TEXT).status_code == 201
    assert http.post(url("fenced"), headers=_producer("q", 3, 0), data="x").status_code == 200
    assert http.post(url("fenced"), headers={**TEXT, "Stream-Seq": "0005"}, data="y").status_code == 204

    assert http.put(url("ttl"), headers={**TEXT, "Stream-TTL": "3600"}, data="t").status_code == 201

    assert http.put(url("source"), headers=TEXT, data="src").status_code == 201
    fork_headers = {**TEXT, "Stream-Forked-From": "/v1/stream/source"}
    assert http.put(url("fork"), headers=fork_headers).status_code == 201
    assert http.post(url("fork"), headers=TEXT, data="+fork").status_code == 204
    assert http.delete(url("source")).status_code == 204  # soft delete: the fork still needs it
    assert http.put(url("gone"), headers=TEXT, data="bye").status_code == 201
    assert http.delete(url("gone")).status_code == 204


def _check_state(http: requests.Session, server: ServerProcess) -> None:
    url = server.stream_url
    closed = http.get(url("closed"))
    assert closed.text == "ab" and closed.headers["Stream-Closed"] == "true"
    duplicate_close = http.post(url("closed"), headers={"Stream-Closed": "true", **_producer("p", 0, 1)})
    assert duplicate_close.status_code == 204 and duplicate_close.headers["Stream-Closed"] == "true"
    assert http.post(url("closed"), headers=TEXT, data="c").status_code == 409

    zombie = http.post(url("fenced"), headers=_producer("q", 2, 0), data="z")
    assert zombie.status_code == 403 and zombie.headers["Producer-Epoch"] == "3"
    assert http.post(url("fenced"), headers=_producer("q", 3, 0), data="x").status_code == 204  # duplicate
    assert http.post(url("fenced"), headers={**TEXT, "Stream-Seq": "0004"}, data="w").status_code == 409
    assert http.get(url("fenced")).text == "xy"

    assert http.head(url("ttl")).headers["Stream-TTL"] == "3600"
    assert http.get(url("fork"), params={"offset": "-1"}).text == "src+fork"
    assert http.head(url("source")).status_code == 410
    assert http.put(url("source"), headers=TEXT).status_code == 409
    assert http.head(url("gone")).status_code == 404
    assert http.put(url("gone"), headers=TEXT).status_code == 201  # a removed path can be reused
    assert http.get(url("gone")).text == ""

    # Removing the last fork removes the soft-deleted source for good.
    assert http.delete(url("fork")).status_code == 204
    assert http.head(url("source")).status_code == 404


@pytest.mark.parametrize("durability", ["wal", "delta"])
@pytest.mark.parametrize("flushed", [False, True], ids=["in-wal", "flushed"])
def test_state_survives_sigkill(server_factory: Callable[..., ServerProcess], durability: str, flushed: bool) -> None:
    flush_ms = "50" if flushed else "600000"
    server = server_factory("--durability", durability, "--flush-interval-ms", flush_ms)
    http = session()
    initial_segments = settled_wal_segments(server.data_dir) if durability == "wal" else []
    _build_state(http, server)
    if durability == "wal":
        if flushed:
            wait_until_wal_flushed(server.data_dir, initial_segments)
        else:
            assert wal_segments(server.data_dir) == initial_segments
    server.kill()
    server.start()
    _check_state(http, server)
    server.kill()
    server.start()  # and once more, after the state written by the checks themselves
    assert http.head(server.stream_url("source")).status_code == 404
    assert http.get(server.stream_url("closed")).text == "ab"
