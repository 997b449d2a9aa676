"""Subscriptions across kill -9 (pending deliveries, cursors, generations, leases, keys) and
their auth scopes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from security_support import bearer, new_token, write_tokens
from servers import ServerProcess, wait_for
from webhook_receiver import WebhookReceiver, verify_signature

LOOPBACK = ("--allow-private-webhook-urls", "127.0.0.0/8")
FAST_RETRIES = ("--webhook-retry-initial-ms", "200", "--webhook-retry-max-ms", "400")
TEXT = {"Content-Type": "text/plain"}


def sub_url(server: ServerProcess, sub_id: str, suffix: str = "") -> str:
    return server.stream_url(f"__ds/subscriptions/{sub_id}{suffix}")


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    started = WebhookReceiver(fail_first=10**6).start()
    yield started
    started.stop()


def test_pending_webhook_delivery_arrives_after_kill_9(
    server_factory: Callable[..., ServerProcess], http: requests.Session, receiver: WebhookReceiver
) -> None:
    server = server_factory(*LOOPBACK, *FAST_RETRIES)
    body = {"type": "webhook", "pattern": "*", "webhook": {"url": receiver.url}}
    kid = http.put(sub_url(server, "k"), json=body).json()["webhook"]["signing"]["kid"]
    assert http.put(server.stream_url("s"), data=b"one", headers=TEXT).status_code == 201
    failed = receiver.wait(2)  # the receiver keeps failing: the wake is pending, retried
    wake_id = failed[0].body["wake_id"]
    server.kill()
    receiver.fail_first, receiver.answer = 0, {"done": True}
    receiver.received.clear()
    server.start()
    (delivered, *_) = receiver.wait(1)
    jwks = http.get(server.stream_url("__ds/jwks.json")).json()
    assert [key["kid"] for key in jwks["keys"]] == [kid]  # the signing key survived
    assert delivered.signature is not None and verify_signature(delivered.raw, delivered.signature, jwks)
    assert (delivered.body["wake_id"], delivered.body["generation"]) == (wake_id, 1)  # the same wake, again
    tail = delivered.body["streams"][0]["tail_offset"]
    wait_for(lambda: http.get(sub_url(server, "k")).json()["streams"][0]["acked_offset"] == tail)
    # An append acknowledged just before kill -9 still wakes the subscription after restart.
    assert http.post(server.stream_url("s"), data=b"two", headers=TEXT).status_code == 204
    server.kill()
    server.start()
    wait_for(lambda: http.get(sub_url(server, "k")).json()["streams"][0]["acked_offset"].startswith("0000000000000002"))
    generations = [item.body["generation"] for item in receiver.received]
    assert generations[0] == 1 and generations[-1] >= 2 and generations == sorted(generations)


def test_cursors_generations_and_leases_survive_kill_9(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory()
    assert http.put(server.stream_url("wake"), data=b"[]", headers={"Content-Type": "application/json"}).ok
    body = {"type": "pull-wake", "streams": ["a", "b"], "wake_stream": "wake", "lease_ttl_ms": 60_000}
    assert http.put(sub_url(server, "p"), json=body).status_code == 201
    for name in ("a", "b"):
        assert http.put(server.stream_url(name), data=b"x", headers=TEXT).status_code == 201
        assert http.post(server.stream_url(name), data=b"y", headers=TEXT).status_code == 204
    claimed = http.post(sub_url(server, "p", "/claim"), json={"worker": "w1"}).json()
    token = {"Authorization": f"Bearer {claimed['token']}"}
    wake = {"wake_id": claimed["wake_id"], "generation": claimed["generation"]}
    acked = {"stream": "a", "offset": "0000000000000002_0000000000000000"}
    assert http.post(sub_url(server, "p", "/ack"), json=wake | {"acks": [acked]}, headers=token).ok
    server.kill()
    server.start()
    state = http.get(sub_url(server, "p")).json()
    assert {item["path"]: item["acked_offset"] for item in state["streams"]} == {
        "a": "0000000000000002_0000000000000000",
        "b": "0000000000000000_0000000000000000",
    }
    busy = http.post(sub_url(server, "p", "/claim"), json={"worker": "w2"})
    assert busy.status_code == 409
    assert (busy.json()["error"]["current_holder"], busy.json()["error"]["generation"]) == ("w1", wake["generation"])
    rest = {"stream": "b", "offset": "0000000000000002_0000000000000000"}
    done = http.post(sub_url(server, "p", "/ack"), json=wake | {"acks": [rest], "done": True}, headers=token)
    assert done.json() == {"ok": True, "next_wake": False}  # the old claim token is still valid
    assert http.post(sub_url(server, "p", "/claim"), json={"worker": "w2"}).status_code == 204


@pytest.fixture
def tokens() -> dict[str, str]:
    return {name: new_token(name) for name in ("admin", "reader", "writer", "events_writer", "bucket_writer")}


def test_auth_scopes(
    server_factory: Callable[..., ServerProcess], http: requests.Session, tokens: dict[str, str], tmp_path: Path
) -> None:
    grants = [
        {"name": "admin", "token": tokens["admin"], "scope": "admin"},
        {"name": "reader", "token": tokens["reader"], "scope": "read"},
        {"name": "writer", "token": tokens["writer"], "scope": "write"},
        {
            "name": "events_writer",
            "token": tokens["events_writer"],
            "scope": "write",
            "prefixes": ["v1/stream/events/"],
        },
        {"name": "bucket_writer", "token": tokens["bucket_writer"], "scope": "write", "buckets": ["bucket-one"]},
    ]
    server = server_factory("--auth-tokens-file", str(write_tokens(tmp_path / "tokens.json", grants)))
    body = {"type": "pull-wake", "pattern": "events/*", "wake_stream": "wake"}
    url = sub_url(server, "p")
    assert http.put(url, json=body).status_code == 401
    assert http.put(url, json=body, headers=bearer(tokens["reader"])).status_code == 403
    # A pattern can reach any stream of the root: a prefix-limited token is not enough.
    assert http.put(url, json=body, headers=bearer(tokens["events_writer"])).status_code == 403
    assert http.put(url, json=body, headers=bearer(tokens["writer"])).status_code == 201
    assert http.get(url).status_code == 401
    assert http.get(url, headers=bearer(tokens["reader"])).status_code == 200
    assert http.get(server.stream_url("__ds/jwks.json")).status_code == 200  # public keys: no token
    writer = bearer(tokens["writer"])
    assert http.put(server.stream_url("wake"), data=b"[]", headers=writer | {"Content-Type": "application/json"}).ok
    assert http.put(server.stream_url("events/1"), data=b"x", headers=writer | TEXT).status_code == 201
    claim_url = sub_url(server, "p", "/claim")
    assert http.post(claim_url, json={"worker": "w"}, headers=bearer(tokens["reader"])).status_code == 403
    claimed = http.post(claim_url, json={"worker": "w"}, headers=writer).json()
    # ack/release carry the claim token instead of a service token.
    release = http.post(
        sub_url(server, "p", "/release"),
        json={"wake_id": claimed["wake_id"], "generation": claimed["generation"]},
        headers=bearer(claimed["token"]),
    )
    assert release.status_code == 204
    forged = http.post(
        sub_url(server, "p", "/ack"),
        json={"wake_id": claimed["wake_id"], "generation": claimed["generation"]},
        headers=bearer(tokens["writer"]),
    )
    assert forged.status_code == 401 and forged.json()["error"]["code"] == "INVALID_TOKEN"
    assert claimed["token"] not in server.log_text()
    # Bucketed surface: a bucket's subscriptions need write on that bucket.
    for bucket in ("bucket-one", "bucket-two"):
        assert http.put(f"{server.url}/{bucket}", headers=bearer(tokens["admin"])).status_code == 201
    in_bucket = body | {"pattern": "*"}
    bucket_writer = bearer(tokens["bucket_writer"])
    assert http.put(f"{server.url}/bucket-one/__ds/subscriptions/b", json=in_bucket, headers=bucket_writer).ok
    refused = http.put(f"{server.url}/bucket-two/__ds/subscriptions/b", json=in_bucket, headers=bucket_writer)
    assert refused.status_code == 403
    assert http.get(f"{server.url}/bucket-two/__ds/subscriptions/b", headers=bearer(tokens["admin"])).status_code == 404
