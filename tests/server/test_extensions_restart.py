"""The extensions' state survives SIGKILL: buckets and their listing, snapshots (bytes and
content type), the retention they imply, bootstrap, and deleted buckets staying deleted.

Each scenario runs twice: killed while the state exists only in the WAL, and killed after
it was flushed into Delta (the WAL segments it came from deleted). A last test lets
background compaction purge what retention and deletes released, then restarts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import requests
from multipart_parsing import Bootstrap, get_bootstrap
from servers import (
    ServerProcess,
    append_all,
    session,
    settled_wal_segments,
    wait_for,
    wait_until_wal_flushed,
    wal_segments,
)

TEXT = {"Content-Type": "text/plain"}
BINARY = {"Content-Type": "application/octet-stream"}
JSON = {"Content-Type": "application/json"}
BUCKETS = ("alpha", "beta-2", "empty_3")
TRICKY = [b"\r\n--ds-", b"--", bytes(range(256)), b"\r\n"]


def _publish(http: requests.Session, url: str, offset: str, blob: bytes, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = http.put(f"{url}/snapshot/{offset}", data=blob, headers=headers)
    assert response.status_code == 204, response.text


class Fixture:
    """The state one test builds, and the offsets it needs to probe it."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.text = f"{server.url}/alpha/text"
        self.json = f"{server.url}/alpha/json"
        self.closed = f"{server.url}/alpha/closed"
        self.binary = f"{server.url}/beta-2/bin"
        self.base = f"{server.url}/v1/stream/restart-base"
        self.offsets: dict[str, list[str]] = {}

    def build(self, http: requests.Session) -> None:
        url = self.server.url
        for bucket_id in (*BUCKETS, "doomed"):
            assert http.put(f"{url}/{bucket_id}").status_code == 201

        assert http.put(self.text, headers=TEXT).status_code == 201
        text_tails = append_all(http, self.text, TEXT, [b"t0", b"t1", b"t2", b"t3", b"t4", b"t5"])
        _publish(http, self.text, text_tails[2], b"\x00T0T1T2\r\n--", "application/x-snap")
        _publish(http, self.text, text_tails[3], b"\x00T0..T3\r\n--ds-", "application/x-snap")  # supersedes
        self.offsets["text"] = text_tails

        start = http.put(self.json, headers=JSON).headers["Stream-Next-Offset"]
        assert http.post(self.json, headers=JSON, data='[{"a": 1}, [2], "three"]').status_code == 204
        self.offsets["json"] = [start]

        assert http.put(self.closed, headers=TEXT, data="bye").status_code == 201
        assert http.post(self.closed, headers={"Stream-Closed": "true"}).status_code == 204

        assert http.put(self.binary, headers=BINARY).status_code == 201
        binary_tails = append_all(http, self.binary, BINARY, TRICKY)
        _publish(http, self.binary, binary_tails[-1], b"".join(TRICKY), None)  # at the tail
        self.offsets["bin"] = binary_tails
        for name in ("x1", "x2", "x3"):
            assert http.put(f"{url}/beta-2/{name}", headers=TEXT, data=name).status_code == 201
        assert http.delete(f"{url}/beta-2/x3").status_code == 204

        assert http.put(self.base, headers=TEXT).status_code == 201
        base_tails = append_all(http, self.base, TEXT, [b"b0", b"b1", b"b2"])
        _publish(http, self.base, base_tails[0], b"B0", "text/x-base")
        self.offsets["base"] = base_tails

        assert http.put(f"{url}/doomed/d", headers=TEXT).status_code == 201
        assert http.delete(f"{url}/doomed/d").status_code == 204
        assert http.delete(f"{url}/doomed").status_code == 204

    def observe(self, http: requests.Session) -> dict[str, Any]:
        """Everything the extensions expose about the state, in comparable form."""
        url = self.server.url
        seen: dict[str, Any] = {}
        for bucket_id in BUCKETS:
            metadata = http.get(f"{url}/{bucket_id}")
            assert metadata.status_code == 200, metadata.text
            seen[f"bucket {bucket_id}"] = metadata.json()
            seen[f"listing {bucket_id}"] = http.get(f"{url}/{bucket_id}/streams").json()
            seen[f"paged {bucket_id}"] = http.get(f"{url}/{bucket_id}/streams", params={"limit": "1"}).json()
        seen["doomed"] = [
            http.get(f"{url}/doomed").status_code,
            http.get(f"{url}/doomed/streams").status_code,
            http.get(f"{url}/doomed/d").status_code,
            http.put(f"{url}/doomed/d", headers=TEXT).status_code,
        ]
        for name, stream in (("text", self.text), ("bin", self.binary), ("base", self.base), ("json", self.json)):
            seen[f"snapshot {name}"] = _snapshot_view(http, stream)
            seen[f"bootstrap {name}"] = _bootstrap_view(get_bootstrap(http, stream))
        text = self.offsets["text"]
        seen["text reads"] = [
            (offset, response.status_code, response.content if response.status_code == 200 else None)
            for offset in ("-1", text[0], text[1], text[2], text[3], text[5])
            for response in [http.get(self.text, params={"offset": offset})]
        ]
        seen["text long-poll below"] = http.get(self.text, params={"offset": text[2], "live": "long-poll"}).status_code
        seen["superseded"] = http.get(f"{self.text}/snapshot/{text[2]}").status_code
        base = self.offsets["base"]
        seen["base reads"] = [http.get(self.base, params={"offset": o}).status_code for o in ("-1", base[0])]
        seen["closed"] = (http.get(self.closed).content, http.head(self.closed).headers.get("Stream-Closed"))
        return seen

    def check(self, seen: dict[str, Any]) -> None:
        """The observed state has the values the build gave it (so equality is not vacuous)."""
        text, binary, base = self.offsets["text"], self.offsets["bin"], self.offsets["base"]
        assert seen["bucket alpha"]["streams"] == 3
        assert seen["bucket beta-2"]["streams"] == 3
        assert seen["bucket empty_3"]["streams"] == 0
        assert [entry["stream_id"] for entry in seen["listing alpha"]["streams"]] == ["closed", "json", "text"]
        assert [entry["stream_id"] for entry in seen["listing beta-2"]["streams"]] == ["bin", "x1", "x2"]
        assert seen["listing empty_3"]["streams"] == []
        assert seen["paged alpha"]["next_cursor"] == "closed" and seen["paged alpha"]["has_more"] is True
        statuses = {entry["stream_id"]: entry["status"] for entry in seen["listing alpha"]["streams"]}
        assert statuses == {"closed": "Closed", "json": "Open", "text": "Open"}
        assert seen["doomed"] == [404, 404, 404, 404]

        assert seen["snapshot text"] == {
            "head": text[3],
            "location": f"/alpha/text/snapshot/{text[3]}",
            "status": 200,
            "body": b"\x00T0..T3\r\n--ds-",
            "content_type": "application/x-snap",
            "snapshot_offset": text[3],
            "next_offset": text[3],
            "up_to_date": "false",
        }
        assert seen["snapshot bin"]["body"] == b"".join(TRICKY)
        assert seen["snapshot bin"]["content_type"] == "application/octet-stream"
        assert seen["snapshot bin"]["up_to_date"] == "true"
        assert seen["snapshot base"]["body"] == b"B0" and seen["snapshot base"]["head"] == base[0]
        assert seen["snapshot json"] == {"head": None, "redirect_status": 404}

        assert seen["bootstrap text"]["snapshot_offset"] == text[3]
        assert seen["bootstrap text"]["snapshot"] == ({"content-type": "application/x-snap"}, b"\x00T0..T3\r\n--ds-")
        assert [body for _, body in seen["bootstrap text"]["updates"]] == [b"t4", b"t5"]
        assert seen["bootstrap text"]["next_offset"] == text[5]
        assert seen["bootstrap bin"]["updates"] == [] and seen["bootstrap bin"]["next_offset"] == binary[-1]
        assert [body for _, body in seen["bootstrap base"]["updates"]] == [b"b1", b"b2"]
        assert seen["bootstrap json"]["snapshot_offset"] == "-1"
        assert [json.loads(body) for _, body in seen["bootstrap json"]["updates"]] == [{"a": 1}, [2], "three"]

        assert seen["text reads"] == [
            ("-1", 410, None),
            (text[0], 410, None),
            (text[1], 410, None),
            (text[2], 410, None),
            (text[3], 200, b"t4t5"),
            (text[5], 200, b""),
        ]
        assert seen["text long-poll below"] == 410
        assert seen["superseded"] == 404
        assert seen["base reads"] == [410, 200]
        assert seen["closed"] == (b"bye", "true")


def _snapshot_view(http: requests.Session, url: str) -> dict[str, Any]:
    head = http.head(url)
    assert head.status_code == 200
    redirect = http.get(f"{url}/snapshot", allow_redirects=False)
    if redirect.status_code != 307:
        return {"head": head.headers.get("Stream-Snapshot-Offset"), "redirect_status": redirect.status_code}
    location = re.sub(r"^http://127\.0\.0\.1:\d+", "", redirect.headers["Location"])  # the port changes
    read = http.get(f"{url}/snapshot/{head.headers['Stream-Snapshot-Offset']}")
    return {
        "head": head.headers["Stream-Snapshot-Offset"],
        "location": location,
        "status": read.status_code,
        "body": read.content,
        "content_type": read.headers["Content-Type"],
        "snapshot_offset": read.headers["Stream-Snapshot-Offset"],
        "next_offset": read.headers["Stream-Next-Offset"],
        "up_to_date": read.headers["Stream-Up-To-Date"],
    }


def _bootstrap_view(bootstrap: Bootstrap) -> dict[str, Any]:
    return {
        "snapshot_offset": bootstrap.snapshot_offset,
        "next_offset": bootstrap.next_offset,
        "up_to_date": bootstrap.up_to_date,
        "snapshot": (bootstrap.snapshot.headers, bootstrap.snapshot.body),
        "updates": [(part.headers, part.body) for part in bootstrap.updates],
    }


@pytest.mark.parametrize("flushed", [False, True], ids=["in-wal", "flushed"])
def test_extension_state_survives_sigkill(server_factory: Callable[..., ServerProcess], flushed: bool) -> None:
    server = server_factory("--flush-interval-ms", "50" if flushed else "600000", "--compaction-interval-s", "0")
    http = session()
    initial = settled_wal_segments(server.data_dir)
    state = Fixture(server)
    state.build(http)
    before = state.observe(http)
    state.check(before)
    if flushed:
        wait_until_wal_flushed(server.data_dir, initial)
    else:
        assert wal_segments(server.data_dir) == initial  # nothing reached Delta
        assert initial[0].stat().st_size > 0

    server.kill()
    server.start()
    after = state.observe(http)
    assert after == before

    # A second life: change the state again, and kill once more.
    url = server.url
    segments = wal_segments(server.data_dir)
    text_tail = state.offsets["text"][-1]
    _publish(http, state.text, text_tail, b"all of text", "text/x-all")
    assert http.delete(f"{url}/empty_3").status_code == 204
    assert http.put(f"{url}/doomed").status_code == 201  # a deleted id can be reused...
    assert http.delete(f"{url}/doomed").status_code == 204  # ...and deleted again
    assert http.put(f"{url}/gamma").status_code == 201
    assert http.put(f"{url}/gamma/g", headers=TEXT, data="g").status_code == 201
    if flushed:
        wait_until_wal_flushed(server.data_dir, segments)
    server.kill()
    server.start()

    assert http.get(f"{url}/empty_3").status_code == 404
    assert http.get(f"{url}/doomed").status_code == 404
    assert http.get(f"{url}/gamma").json()["streams"] == 1
    assert http.get(f"{url}/gamma/g").text == "g"
    assert http.head(state.text).headers["Stream-Snapshot-Offset"] == text_tail
    assert http.get(f"{state.text}/snapshot/{state.offsets['text'][3]}").status_code == 404
    latest = http.get(f"{state.text}/snapshot")
    assert (latest.content, latest.headers["Content-Type"]) == (b"all of text", "text/x-all")
    assert http.get(state.text, params={"offset": state.offsets["text"][3]}).status_code == 410
    bootstrap = get_bootstrap(http, state.text)
    assert bootstrap.snapshot.body == b"all of text" and bootstrap.updates == []
    listing = http.get(f"{url}/alpha/streams").json()
    text_entry = next(entry for entry in listing["streams"] if entry["stream_id"] == "text")
    assert text_entry.pop("earliest_offset") == text_tail  # (the snapshot's offset: below it is gone)
    expected = {**before["listing alpha"], "streams": [dict(entry) for entry in before["listing alpha"]["streams"]]}
    next(entry for entry in expected["streams"] if entry["stream_id"] == "text").pop("earliest_offset")
    assert listing == expected


def test_retention_and_deletes_survive_compaction_and_restart(server_factory: Callable[..., ServerProcess]) -> None:
    args = ("--flush-interval-ms", "50", "--tail-cache-bytes", "0", "--compaction-interval-s", "0.3")
    server = server_factory(*args, "--vacuum-retention-hours", "0")
    http = session()
    initial = settled_wal_segments(server.data_dir)
    url = server.url
    for bucket_id in ("kept", "purged"):
        assert http.put(f"{url}/{bucket_id}").status_code == 201
    stream = f"{url}/kept/s"
    assert http.put(stream, headers=BINARY).status_code == 201
    messages = [b"m%02d\r\n--" % index for index in range(20)]
    tails = append_all(http, stream, BINARY, messages)
    _publish(http, stream, tails[9], b"first ten", None)  # retains messages 10..19
    assert http.put(f"{url}/purged/p", headers=TEXT, data="p").status_code == 201
    assert http.delete(f"{url}/purged/p").status_code == 204
    assert http.delete(f"{url}/purged").status_code == 204
    wait_until_wal_flushed(server.data_dir, initial)

    def compacted_with_retention() -> bool:
        return bool(re.search(r"msg=compacted .*retention_purges=1\b", server.log_text()))

    wait_for(compacted_with_retention, timeout_s=30)

    def check() -> None:
        bootstrap = get_bootstrap(http, stream)
        assert bootstrap.snapshot.body == b"first ten"
        assert bootstrap.snapshot_offset == tails[9]
        assert bootstrap.update_bodies == messages[10:]
        assert http.get(stream, params={"offset": tails[9]}).content == b"".join(messages[10:])
        assert http.get(stream, params={"offset": tails[8]}).status_code == 410
        assert http.get(stream, params={"offset": "-1"}).status_code == 410
        assert http.get(f"{url}/purged").status_code == 404
        assert http.get(f"{url}/kept").json()["streams"] == 1

    check()
    server.kill()
    server.start()
    check()
    more = append_all(http, stream, BINARY, [b"after restart"])
    assert http.get(stream, params={"offset": tails[-1]}).content == b"after restart"
    assert get_bootstrap(http, stream).next_offset == more[-1]
