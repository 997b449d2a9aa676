"""Retention policies (extension): limits of age, bytes and messages, moved by maintenance passes.

Every test runs a real server over HTTP; the removal is checked in the Delta table itself, and
every read is checked against what was appended.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

import requests
from deltalake import DeltaTable
from servers import ServerProcess, session, wait_for

BINARY = {"Content-Type": "application/octet-stream"}
TEXT = {"Content-Type": "text/plain"}
MAINTENANCE = ("--flush-interval-ms", "50", "--vacuum-retention-hours", "0", "--compaction-interval-s", "0.3")
MIB = 1024 * 1024


def earliest(http: requests.Session, url: str) -> int:
    """The sequence of the stream's earliest readable offset (HEAD)."""
    head = http.head(url)
    assert head.status_code == 200, head.text
    return _seq(head.headers["Stream-Earliest-Offset"])


def _seq(offset: str) -> int:
    return int(offset.split("_")[0])


def _offset(seq: int) -> str:
    return f"{seq:016d}_0000000000000000"


def stored_message_bytes(server: ServerProcess, name: str) -> tuple[int, int]:
    """(rows, bytes) of the stream's message rows in the Delta table (read again if a vacuum removed a
    file of the version read meanwhile: passes run every 0.3 s)."""
    for _ in range(20):
        try:
            table = DeltaTable(str(server.data_dir / "delta" / "streams")).to_pyarrow_table()
            break
        except FileNotFoundError:
            time.sleep(0.05)  # (a backoff before reading it again)
    rows = [row for row in table.to_pylist() if row["stream"] == f"v1/stream/{name}" and row["kind"] == "message"]
    return len(rows), sum(len(row["data"]) for row in rows)


def append_all(http: requests.Session, url: str, prefix: str, numbers: range) -> None:
    for number in numbers:
        assert http.post(url, headers=TEXT, data=f"{prefix}{number};").status_code == 204


def texts(prefix: str, numbers: range) -> str:
    return "".join(f"{prefix}{number};" for number in numbers)


def limited(http: requests.Session, url: str, limit: tuple[str, str], prefix: str, count: int) -> None:
    """Create a text stream with one retention limit (header, value) and append ``count`` messages."""
    assert http.put(url, headers={**TEXT, limit[0]: limit[1]}).status_code == 201
    append_all(http, url, prefix, range(count))


def assert_kept_from(http: requests.Session, url: str, first: int, prefix: str, end: int) -> None:
    """The stream's earliest offset is ``first``: a read below answers 410, one from it the rest."""
    assert earliest(http, url) == first
    assert http.get(url, params={"offset": _offset(first - 1)}).status_code == 410
    assert http.get(url, params={"offset": _offset(first)}).text == texts(prefix, range(first, end))


def passes(server: ServerProcess) -> int:
    return len(re.findall(r"msg=compacted ", server.log_text()))


def test_a_1_mib_limit_keeps_the_newest_mib_and_410s_below_it(server_factory: Callable[..., ServerProcess]) -> None:
    """10 MiB appended in 64 KiB appends under a 1 MiB limit: at least 1 MiB kept, at most 1 MiB + one
    mark's run (1/8 of the limit); the rows below are gone from Delta; a read below answers 410 naming
    the earliest offset; a read from it returns exactly the newest bytes appended."""
    server = server_factory(*MAINTENANCE)
    http = session()
    url = server.stream_url("bounded")
    created = http.put(url, headers={**BINARY, "Stream-Retention-Max-Bytes": str(MIB)})
    assert created.status_code == 201, created.text
    chunks = [os.urandom(64 * 1024) for _ in range(160)]
    for chunk in chunks:
        assert http.post(url, headers=BINARY, data=chunk).status_code == 204
    appended = b"".join(chunks)

    def settled() -> bool:
        head = http.head(url)
        kept = int(head.headers["Stream-Retained-Bytes"])
        return kept <= MIB + MIB // 8 and stored_message_bytes(server, "bounded")[1] == kept

    wait_for(settled, timeout_s=60)
    head = http.head(url)
    assert head.headers["Stream-Retention-Max-Bytes"] == str(MIB)
    kept = int(head.headers["Stream-Retained-Bytes"])
    first = _seq(head.headers["Stream-Earliest-Offset"])
    assert MIB <= kept <= MIB + MIB // 8
    assert kept == sum(len(chunk) for chunk in chunks[first:])
    assert stored_message_bytes(server, "bounded") == (160 - first, kept)
    metrics = dict(
        re.findall(
            r"^(durable_streams_retention_removed_\w+_total) (\S+)$", http.get(f"{server.url}/metrics").text, re.M
        )
    )
    assert float(metrics["durable_streams_retention_removed_messages_total"]) == first
    assert float(metrics["durable_streams_retention_removed_bytes_total"]) == len(appended) - kept
    overview = http.get(f"{server.url}/v1/status/overview").json()
    assert overview["retention"] == {"removed_messages": first, "removed_bytes": len(appended) - kept}

    gone = http.get(url, params={"offset": "-1"})
    assert gone.status_code == 410
    assert gone.json()["error"]["code"] == "OFFSET_GONE"
    assert gone.headers["Stream-Earliest-Offset"] == head.headers["Stream-Earliest-Offset"]
    assert http.get(url, params={"offset": _offset(first - 1)}).status_code == 410
    read = b""
    offset = head.headers["Stream-Earliest-Offset"]
    while True:
        answer = http.get(url, params={"offset": offset})
        assert answer.status_code == 200
        read += answer.content
        offset = answer.headers["Stream-Next-Offset"]
        if answer.headers.get("Stream-Up-To-Date") == "true":
            break
    assert read == appended[len(appended) - kept :]


def test_limits_of_messages_and_age(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*MAINTENANCE)
    http = session()
    counted = server.stream_url("counted")
    limited(http, counted, ("Stream-Retention-Max-Messages", "10"), "m", 100)
    wait_for(lambda: earliest(http, counted) == 90, timeout_s=30)
    assert_kept_from(http, counted, 90, "m", 100)

    aged = server.stream_url("aged")
    assert http.put(aged, headers={**TEXT, "Stream-Retention-Max-Age": "6"}).status_code == 201
    append_all(http, aged, "old", range(5))
    time.sleep(6.5)  # (the limit is one of time: the first five must age past it)
    append_all(http, aged, "new", range(5))
    wait_for(lambda: earliest(http, aged) == 5, timeout_s=5)  # (before the new ones are 6 s old)
    assert http.get(aged, params={"offset": _offset(5)}).text == texts("new", range(5))
    # A stream that stopped growing goes whole once the age limit passed its last append.
    wait_for(lambda: earliest(http, aged) == 10, timeout_s=20)
    assert http.get(aged, params={"offset": _offset(9)}).status_code == 410
    assert http.get(aged, params={"offset": _offset(10)}).text == ""


def test_retention_survives_kill_9_and_restart(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*MAINTENANCE)
    http = session()
    url = server.stream_url("kept")
    limited(http, url, ("Stream-Retention-Max-Messages", "8"), "a", 40)
    wait_for(lambda: earliest(http, url) == 32, timeout_s=30)
    server.kill()
    server.start()
    assert_kept_from(http, url, 32, "a", 40)
    append_all(http, url, "a", range(40, 48))
    wait_for(lambda: earliest(http, url) == 40, timeout_s=30)
    server.stop()
    server.start()
    assert earliest(http, url) == 40
    wait_for(lambda: stored_message_bytes(server, "kept")[0] == 8, timeout_s=30)
    assert http.get(url, params={"offset": _offset(40)}).text == texts("a", range(40, 48))


def test_patch_sets_and_removes_limits_and_refuses_bad_ones(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*MAINTENANCE)
    http = session()
    url = server.stream_url("changed")
    assert http.put(url, headers=TEXT).status_code == 201
    assert "Stream-Retention-Max-Messages" not in http.head(url).headers
    append_all(http, url, "b", range(20))

    for bad in ({"Stream-Retention-Max-Messages": "0"}, {"Stream-Retention-Max-Bytes": "-5"}, {}):
        refused = http.patch(url, headers=bad)
        assert refused.status_code == 400, bad
        assert refused.json()["error"]["code"] == "INVALID_RETENTION"
    assert "Stream-Retention-Max-Messages" not in http.head(url).headers

    changed = http.patch(url, headers={"Stream-Retention-Max-Messages": "10"})
    assert changed.status_code == 204
    assert changed.headers["Stream-Retention-Max-Messages"] == "10"
    # A limit set on a stream counts from then on: what was there goes once ten more came after it.
    seen = passes(server)
    wait_for(lambda: passes(server) >= seen + 2, timeout_s=30)  # (a whole pass since the limit was set)
    assert earliest(http, url) == 0
    append_all(http, url, "b", range(20, 30))
    wait_for(lambda: earliest(http, url) == 20, timeout_s=30)

    removed = http.patch(url, headers={"Stream-Retention-Max-Messages": "none"})
    assert removed.status_code == 204
    assert "Stream-Retention-Max-Messages" not in removed.headers
    append_all(http, url, "b", range(30, 60))
    seen = passes(server)
    wait_for(lambda: passes(server) >= seen + 2, timeout_s=30)
    assert earliest(http, url) == 20
    assert http.get(url, params={"offset": _offset(20)}).text == texts("b", range(20, 60))
    assert http.patch(server.stream_url("absent"), headers={"Stream-Retention-Max-Age": "5"}).status_code == 404


def test_bad_limits_on_create_store_nothing_and_a_repeat_must_match(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory(*MAINTENANCE)
    http = session()
    url = server.stream_url("strict")
    for bad in ("0", "-1", "1.5", "ten", "99999999999999999"):
        refused = http.put(url, headers={**TEXT, "Stream-Retention-Max-Age": bad})
        assert refused.status_code == 400, bad
        assert "Stream-Retention-Max-Age" in refused.json()["error"]["message"]
        assert http.head(url).status_code == 404
    assert http.put(url, headers={**TEXT, "Stream-Retention-Max-Age": "60"}).status_code == 201
    assert http.put(url, headers=TEXT).status_code == 200
    # A repeated PUT leaves the limits be (they are the stream's to change: PATCH), so an app that
    # creates its stream at every start is not refused once an operator changed them.
    assert http.patch(url, headers={"Stream-Retention-Max-Age": "120"}).status_code == 204
    assert http.put(url, headers={**TEXT, "Stream-Retention-Max-Age": "60"}).status_code == 200
    assert http.head(url).headers["Stream-Retention-Max-Age"] == "120"
    assert http.put(url, headers={"Content-Type": "application/json"}).status_code == 409  # (other settings are)


def test_defaults_of_the_server_and_of_a_bucket(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*MAINTENANCE, "--retention-max-messages", "5", "--retention-max-age-s", "1h")
    http = session()
    plain = server.stream_url("plain")
    assert http.put(plain, headers=TEXT).status_code == 201
    head = http.head(plain).headers
    assert (head["Stream-Retention-Max-Messages"], head["Stream-Retention-Max-Age"]) == ("5", "3600")
    unlimited = server.stream_url("unlimited")
    assert http.put(unlimited, headers={**TEXT, "Stream-Retention-Max-Messages": "none"}).status_code == 201
    head = http.head(unlimited).headers
    assert "Stream-Retention-Max-Messages" not in head and head["Stream-Retention-Max-Age"] == "3600"

    bucket = f"{server.url}/logs"
    made = http.put(bucket, headers={"Stream-Retention-Max-Messages": "100", "Stream-Retention-Max-Age": "none"})
    assert made.status_code == 201, made.text
    assert made.json()["retention"] == {"max_messages": 100, "max_age_s": None}
    bucketed = f"{server.url}/logs/app"
    assert http.put(bucketed, headers=TEXT).status_code == 201
    head = http.head(bucketed).headers
    assert head["Stream-Retention-Max-Messages"] == "100" and "Stream-Retention-Max-Age" not in head
    own = f"{server.url}/logs/own"
    assert http.put(own, headers={**TEXT, "Stream-Retention-Max-Messages": "3"}).status_code == 201
    append_all(http, own, "c", range(10))
    wait_for(lambda: earliest(http, own) == 7, timeout_s=30)
    listing = http.get(f"{server.url}/logs/streams").json()["streams"]
    entries = {entry["stream_id"]: entry for entry in listing}
    assert entries["own"]["earliest_offset"] == _offset(7)
    assert entries["own"]["retained_bytes"] == 9
    assert entries["own"]["retention"] == {"max_messages": 3}
    assert entries["app"]["earliest_offset"] == _offset(0)

    server.stop()
    server.start()  # (the bucket's defaults are state: they outlive a restart)
    later = f"{server.url}/logs/later"
    assert http.put(later, headers=TEXT).status_code == 201
    assert http.head(later).headers["Stream-Retention-Max-Messages"] == "100"


def test_forks_and_snapshots_hold_the_point(server_factory: Callable[..., ServerProcess]) -> None:
    """A fork's inherited messages are never removed under it (until the fork's own point passes
    its fork point); a point never passes the latest snapshot (bootstrap needs what follows it)."""
    server = server_factory(*MAINTENANCE)
    http = session()
    source = server.stream_url("source")
    assert http.put(source, headers={**TEXT, "Stream-Retention-Max-Messages": "4"}).status_code == 201
    assert http.post(source, headers=TEXT, data="s0;").status_code == 204
    fork = server.stream_url("fork")
    fork_headers = {**TEXT, "Stream-Forked-From": "/v1/stream/source", "Stream-Retention-Max-Messages": "1"}
    forked = http.put(fork, headers=fork_headers)
    assert forked.status_code == 201, forked.text
    append_all(http, source, "s", range(1, 10))
    seen = passes(server)
    wait_for(lambda: passes(server) >= seen + 2, timeout_s=30)
    assert earliest(http, source) == 0
    assert http.get(fork, params={"offset": "-1"}).text == "s0;"
    assert http.get(source, params={"offset": "-1"}).text == texts("s", range(10))
    append_all(http, fork, "f", range(3))  # (the fork's own limit of 1 lets go of s0 too: it pins nothing then)
    wait_for(lambda: earliest(http, source) == 6 and earliest(http, fork) == 3, timeout_s=30)
    assert http.get(fork, params={"offset": "-1"}).status_code == 410

    snapshotted = server.stream_url("snapshotted")
    assert http.put(snapshotted, headers={**TEXT, "Stream-Retention-Max-Messages": "2"}).status_code == 201
    append_all(http, snapshotted, "t", range(5))
    assert http.put(f"{snapshotted}/snapshot/{_offset(3)}", data=b"state").status_code == 204
    append_all(http, snapshotted, "t", range(5, 10))
    seen = passes(server)
    wait_for(lambda: passes(server) >= seen + 2, timeout_s=30)
    assert earliest(http, snapshotted) == 3
    bootstrap = http.get(f"{snapshotted}/bootstrap")
    assert bootstrap.status_code == 200
    assert b"state" in bootstrap.content and b"t3;" in bootstrap.content and b"t9;" in bootstrap.content
