"""The status page's routes and JSON over real HTTP (the browser tests drive the page itself):
``/ui`` shadows no bucket or stream, ``/v1/status/...`` answers what the README documents,
filters and refuses bad input with the protocol's JSON errors, cuts every answer to what the
token may read, and the chart's rates move with appends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from security_support import bearer, new_token, write_tokens
from servers import ServerProcess, session, wait_for

from durable_streams_server.http.ui.streams_view import may_read, readable
from durable_streams_server.protocol.errors import BadRequest
from durable_streams_server.protocol.ids import validate_bucket_id
from durable_streams_server.protocol.tokens import TokenGrant

JSON = {"Content-Type": "application/json"}
TEXT = {"Content-Type": "text/plain"}
BINARY = {"Content-Type": "application/octet-stream"}


@pytest.fixture
def http() -> Iterator[requests.Session]:
    with session() as s:
        yield s


def status(http: requests.Session, server: ServerProcess, view: str, **params: str) -> Any:
    response = http.get(f"{server.url}/v1/status/{view}", params=params)
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == "no-store"
    return response.json()


def test_ui_paths_shadow_no_bucket_and_the_base_surface_keeps_a_stream_named_ui(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory()
    with pytest.raises(BadRequest):
        validate_bucket_id("ui")  # too short: no bucket can be named ui
    for path in ("/ui", "/"):  # (the root leads to the status page too)
        page = http.get(f"{server.url}{path}", allow_redirects=False)
        assert page.status_code == 308 and page.headers["Location"] == "ui/", path
    assert http.get(f"{server.url}/").url == f"{server.url}/ui/"
    index = http.get(f"{server.url}/ui/")
    assert index.status_code == 200 and index.headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in index.headers["Content-Security-Policy"]
    for asset, kind in (("app.js", "text/javascript"), ("style.css", "text/css"), ("status-page.png", "image/png")):
        answer = http.get(f"{server.url}/ui/{asset}")
        assert answer.status_code == 200 and answer.headers["Content-Type"].startswith(kind)
    missing = http.get(f"{server.url}/ui/nothing.js")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    # /ui/x is the page's, never a bucket's stream: writes are refused, nothing is created
    for method in ("PUT", "POST", "DELETE"):
        refused = http.request(method, f"{server.url}/ui/x", data=b"a", headers=TEXT)
        assert refused.status_code == 405, (method, refused.text)
        assert refused.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert http.put(f"{server.url}/ui", headers=TEXT).status_code == 405
    # the base surface is /v1/stream/...: a stream named ui is an ordinary stream
    assert http.put(server.stream_url("ui"), data=b"hello", headers=TEXT).status_code == 201
    assert http.post(server.stream_url("ui"), data=b" world", headers=TEXT).status_code == 204
    assert http.get(server.stream_url("ui"), params={"offset": "-1"}).content == b"hello world"
    assert [row["name"] for row in status(http, server, "streams")["streams"]] == ["v1/stream/ui"]


def test_status_views_answer_streams_messages_and_subscriptions(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory()
    assert http.put(server.stream_url("orders/eu"), data=b'[{"n":1},{"n":2}]', headers=JSON).status_code == 201
    assert http.put(server.stream_url("raw"), data=bytes(range(5)), headers=BINARY).status_code == 201
    assert http.put(f"{server.url}/shop").status_code == 201
    assert http.put(f"{server.url}/shop/events", data=b"a", headers=TEXT).status_code == 201
    assert http.put(server.stream_url("ttl"), headers={**TEXT, "Stream-TTL": "3600"}).status_code == 201
    assert http.post(server.stream_url("ttl"), headers={"Stream-Closed": "true"}).status_code == 204

    overview = status(http, server, "overview")
    assert overview["streams"] == 4 and overview["buckets"] == ["shop"] and overview["whole_server"] is True
    assert overview["storage"]["durability"] == "wal" and overview["storage"]["degraded"] is None
    assert overview["storage"]["stored_bytes"] >= len('{"n":1}{"n":2}') + 5 + 1
    assert set(overview["memory"]) >= {"held_bytes", "limit_bytes", "in_flight_bytes"}
    assert overview["live_readers"] == {"long_poll": 0, "sse": 0}

    rows = {row["name"]: row for row in status(http, server, "streams")["streams"]}
    assert sorted(rows) == ["shop/events", "v1/stream/orders/eu", "v1/stream/raw", "v1/stream/ttl"]
    orders = rows["v1/stream/orders/eu"]
    assert (orders["messages"], orders["tail_offset"], orders["status"]) == (
        2,
        "0000000000000002_0000000000000000",
        "open",
    )
    assert orders["url"] == "/v1/stream/orders/eu" and orders["bucket"] is None and orders["last_append_at_ms"] > 0
    assert orders["bytes"] == len('{"n":1}{"n":2}') and rows["v1/stream/raw"]["bytes"] == 5
    assert rows["shop/events"]["bucket"] == "shop" and rows["shop/events"]["url"] == "/shop/events"
    assert (rows["v1/stream/ttl"]["status"], rows["v1/stream/ttl"]["ttl_s"]) == ("closed", 3600)
    assert 3590 <= rows["v1/stream/ttl"]["ttl_remaining_s"] <= 3600

    assert [row["name"] for row in status(http, server, "streams", bucket="shop")["streams"]] == ["shop/events"]
    assert [row["name"] for row in status(http, server, "streams", q="orders")["streams"]] == ["v1/stream/orders/eu"]
    cut = status(http, server, "streams", limit="1")
    assert (cut["matched"], len(cut["streams"]), cut["truncated"]) == (4, 1, True)
    first = status(http, server, "streams", limit="2")["streams"]  # (the first by name, of all that match)
    assert [row["name"] for row in [*cut["streams"], *first]] == ["shop/events", "shop/events", "v1/stream/orders/eu"]
    for bad in ("0", "1001", "x", "²"):
        refused = http.get(f"{server.url}/v1/status/streams", params={"limit": bad})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_LIMIT", bad

    recent = status(http, server, "stream", name="v1/stream/orders/eu")
    assert [(m["offset"], m["text"]) for m in recent["messages"]] == [
        ("0000000000000000_0000000000000000", '{"n":1}'),
        ("0000000000000001_0000000000000000", '{"n":2}'),
    ]
    assert recent["next_offset"] == "0000000000000002_0000000000000000"
    assert status(http, server, "stream", name="v1/stream/raw")["messages"][0]["hex"] == "0001020304"
    unknown = http.get(f"{server.url}/v1/status/stream", params={"name": "v1/stream/nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "STREAM_NOT_FOUND"
    assert http.get(f"{server.url}/v1/status/stream").json()["error"]["code"] == "INVALID_STREAM_NAME"
    assert http.get(f"{server.url}/v1/status/nope").status_code == 404
    refused = http.post(f"{server.url}/v1/status/overview")
    assert refused.status_code == 405 and refused.json()["error"]["code"] == "METHOD_NOT_ALLOWED"

    assert http.put(server.stream_url("wake"), data=b"[]", headers=JSON).status_code == 201
    body = {"type": "pull-wake", "pattern": "orders/*", "wake_stream": "wake"}
    assert http.put(server.stream_url("__ds/subscriptions/pw"), json=body).status_code == 201
    assert http.post(server.stream_url("orders/eu"), data=b'{"n":3}', headers=JSON).status_code == 204
    wait_for(lambda: status(http, server, "subscriptions")["subscriptions"][0]["wake"] is not None)
    (sub,) = status(http, server, "subscriptions")["subscriptions"]
    assert (sub["root"], sub["id"], sub["type"], sub["pattern"]) == ("v1/stream/", "pw", "pull-wake", "orders/*")
    assert sub["streams"] == 1 and sub["pending_streams"] == 1 and sub["failing"] is False
    assert sub["wake"]["holder"] is None and sub["wake"]["lease_expires_ms"] is None


def test_rates_follow_appends_between_looks(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory()
    assert http.put(server.stream_url("r"), headers=TEXT).status_code == 201
    assert status(http, server, "overview")["rates"] == []  # one point: no step yet
    for _ in range(10):
        assert http.post(server.stream_url("r"), data=b"0123456789", headers=TEXT).status_code == 204

    def stepped() -> bool:
        return bool(status(http, server, "overview")["rates"])  # a point at most once a second

    wait_for(stepped, timeout_s=30)
    (step,) = status(http, server, "overview")["rates"][:1]
    assert step["appends_per_s"] > 0 and step["bytes_per_s"] > 0
    overview = status(http, server, "overview")
    assert overview["appends"] == 10 and overview["storage"]["stored_bytes"] == 100


def test_status_needs_a_token_and_shows_only_what_it_may_read(
    server_factory: Callable[..., ServerProcess], tmp_path: Path, http: requests.Session
) -> None:
    admin, team, bucket_reader = new_token("admin"), new_token("team"), new_token("bucket")
    tokens = write_tokens(
        tmp_path / "tokens.json",
        [
            {"name": "admin", "token": admin, "scope": "admin"},
            {"name": "team", "token": team, "scope": "read", "prefixes": ["v1/stream/team-a/"]},
            {"name": "bucket", "token": bucket_reader, "scope": "read", "buckets": ["shop"]},
        ],
    )
    server = server_factory("--auth-tokens-file", str(tokens))
    as_admin = bearer(admin)
    assert http.put(server.stream_url("team-a/x"), headers={**TEXT, **as_admin}).status_code == 201
    assert http.put(server.stream_url("team-b/y"), headers={**TEXT, **as_admin}).status_code == 201
    assert http.put(f"{server.url}/shop", headers=as_admin).status_code == 201
    assert http.put(f"{server.url}/shop/z", headers={**TEXT, **as_admin}).status_code == 201

    assert http.get(f"{server.url}/ui/").status_code == 200  # the page holds no data
    for view in ("overview", "streams", "subscriptions"):
        refused = http.get(f"{server.url}/v1/status/{view}")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHORIZED", view
    wrong = http.get(f"{server.url}/v1/status/overview", headers=bearer(new_token("nobody")))
    assert wrong.status_code == 401

    def names(token: str) -> list[str]:
        answer = http.get(f"{server.url}/v1/status/streams", headers=bearer(token))
        assert answer.status_code == 200, answer.text
        return [row["name"] for row in answer.json()["streams"]]

    assert names(admin) == ["shop/z", "v1/stream/team-a/x", "v1/stream/team-b/y"]
    assert names(team) == ["v1/stream/team-a/x"]
    assert names(bucket_reader) == ["shop/z"]
    limited = http.get(f"{server.url}/v1/status/overview", headers=bearer(team)).json()
    assert limited == {"token": "team", "whole_server": False, "streams": 1, "buckets": []}
    assert http.get(f"{server.url}/v1/status/overview", headers=bearer(bucket_reader)).json()["buckets"] == ["shop"]
    hidden = http.get(f"{server.url}/v1/status/stream", params={"name": "v1/stream/team-b/y"}, headers=bearer(team))
    assert hidden.status_code == 404  # as if it did not exist
    assert http.get(f"{server.url}/v1/status/subscriptions", headers=bearer(team)).json() == {"subscriptions": []}


def test_the_listing_s_check_of_many_names_is_the_policy_s_rule() -> None:
    """``readable`` (the listing's Arrow filter over a column of names) equals ``may_read`` (the
    permission policy's ``Need.covered_by``) for every kind of grant."""
    names = [f"v1/stream/team-{t}/s{i}" for t in "ab" for i in range(3)]
    names += [f"shop{b}/s{i}" for b in "xy" for i in range(3)] + ["v1/stream/shopx/s0", "v1/stream/team-a"]
    grants = [
        TokenGrant("all", "read"),
        TokenGrant("prefix", "read", prefixes=("v1/stream/team-a/",)),
        TokenGrant("bucket", "read", buckets=frozenset({"shopx"})),
        TokenGrant("both", "write", prefixes=("v1/stream/team-b",), buckets=frozenset({"shopy"})),
        TokenGrant("bucket-prefix", "read", prefixes=("shopx/s1",)),
    ]
    column = pa.chunked_array([pa.array(names[:5]), pa.array(names[5:])])
    for grant in grants:
        mask = readable(column, grant).to_pylist()
        assert [name for name, ok in zip(names, mask, strict=True) if ok] == [n for n in names if may_read(grant, n)]
        assert any(mask) and (grant.unlimited or not all(mask))
