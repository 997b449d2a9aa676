"""Subscriptions over real HTTP: the reserved namespace, signed webhooks, retries, pull-wake
leases, SSRF refusals, and the bucketed surface. Durability and auth: test_subscription_durability.py."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import requests
from servers import ServerProcess, wait_for
from webhook_receiver import WebhookReceiver, verify_signature

LOOPBACK = ("--allow-private-webhook-urls", "127.0.0.0/8")
FAST_RETRIES = ("--webhook-retry-initial-ms", "200", "--webhook-retry-max-ms", "1000")
JSON = {"Content-Type": "application/json"}


def sub_url(server: ServerProcess, sub_id: str, suffix: str = "") -> str:
    return server.stream_url(f"__ds/subscriptions/{sub_id}{suffix}")


def put_sub(http: requests.Session, server: ServerProcess, sub_id: str, body: dict[str, object]) -> requests.Response:
    return http.put(sub_url(server, sub_id), json=body)


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    started = WebhookReceiver().start()
    yield started
    started.stop()


def test_the_reserved_namespace_never_creates_a_stream(plain_server: ServerProcess, http: requests.Session) -> None:
    server = plain_server
    for path in ("__ds", "__ds/subscriptions", "__ds/x/y", "__ds/subscriptions/s1/nope"):
        put = http.put(server.stream_url(path), data=b"x", headers={"Content-Type": "text/plain"})
        assert put.status_code == 404, (path, put.status_code, put.text)
        assert put.json()["error"]["code"] == "NOT_FOUND"
        assert http.post(server.stream_url(path), data=b"x").status_code in (404,)
    # A subscription body on the stream URL makes a subscription, and no stream.
    created = put_sub(http, server, "s1", {"type": "pull-wake", "pattern": "a/*", "wake_stream": "w"})
    assert created.status_code == 201, created.text
    assert http.head(server.stream_url("__ds/subscriptions/s1")).status_code == 200
    assert http.delete(server.stream_url("__ds/subscriptions/s1")).status_code == 204
    assert http.get(server.stream_url("__ds/subscriptions/s1")).status_code == 404
    assert http.put(server.stream_url("__ds/jwks.json"), data=b"x").status_code == 405
    # Bucketed surface: /{bucket}/__ds is the bucket's control namespace, not a stream id.
    assert http.put(f"{server.url}/bucket-one").status_code == 201
    assert http.put(f"{server.url}/bucket-one/__ds", data=b"x").status_code == 404
    assert http.put(f"{server.url}/bucket-one/__ds/subscriptions/s1/x", data=b"x").status_code == 404
    assert http.get(f"{server.url}/bucket-one/streams").json()["streams"] == []


def test_create_reconfirm_conflict_and_membership(plain_server: ServerProcess, http: requests.Session) -> None:
    server = plain_server
    assert http.put(server.stream_url("events/old"), data=b"1", headers=JSON | {"Content-Type": "text/plain"}).ok
    body = {"type": "pull-wake", "pattern": "events/*", "streams": ["manual/a"], "wake_stream": "wake"}
    assert put_sub(http, server, "s", body).status_code == 201
    assert put_sub(http, server, "s", body).status_code == 200
    conflict = put_sub(http, server, "s", body | {"description": "changed"})
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "SUBSCRIPTION_EXISTS"
    state = http.get(sub_url(server, "s")).json()
    # The existing stream is linked at its tail (no replay of history), the explicit one at 0.
    assert state["streams"] == [
        {"path": "events/old", "link_type": "glob", "acked_offset": "0000000000000001_0000000000000000"},
        {"path": "manual/a", "link_type": "explicit", "acked_offset": "0000000000000000_0000000000000000"},
    ]
    assert http.post(sub_url(server, "s", "/streams"), json={"streams": ["events/old", "x/y"]}).status_code == 204
    links = {item["path"]: item["link_type"] for item in http.get(sub_url(server, "s")).json()["streams"]}
    assert links == {"events/old": "explicit", "manual/a": "explicit", "x/y": "explicit"}
    # Removing the explicit link of a glob-matched stream leaves the glob link.
    assert http.delete(sub_url(server, "s", "/streams/events%2Fold")).status_code == 204
    assert http.delete(sub_url(server, "s", "/streams/x/y")).status_code == 204
    assert http.delete(sub_url(server, "s", "/streams/x/y")).status_code == 204  # idempotent
    links = {item["path"]: item["link_type"] for item in http.get(sub_url(server, "s")).json()["streams"]}
    assert links == {"events/old": "glob", "manual/a": "explicit"}
    bad = http.put(sub_url(server, "t"), data=b"{not json")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_JSON"


def test_signed_webhook_deliveries_verify_against_the_jwks(
    server_factory: Callable[..., ServerProcess], http: requests.Session, receiver: WebhookReceiver
) -> None:
    server = server_factory(*LOOPBACK)
    created = put_sub(
        http, server, "hook", {"type": "webhook", "pattern": "orders/*", "webhook": {"url": receiver.url}}
    )
    assert created.status_code == 201
    signing = created.json()["webhook"]["signing"]
    jwks_response = http.get(signing["jwks_url"])
    assert jwks_response.headers["Content-Type"].startswith("application/jwk-set+json")
    jwks = jwks_response.json()
    assert http.put(server.stream_url("orders/1"), data=b'{"n":1}', headers=JSON).status_code == 201
    (first,) = receiver.wait(1)
    assert first.signature is not None and verify_signature(first.raw, first.signature, jwks)
    assert f"kid={signing['kid']}," in first.signature
    assert not verify_signature(first.raw.replace(b"orders", b"ordeRs"), first.signature, jwks)
    body = first.body
    assert body["subscription_id"] == "hook" and body["generation"] == 1
    assert body["streams"] == [
        {
            "path": "orders/1",
            "link_type": "glob",
            "acked_offset": "0000000000000000_0000000000000000",
            "tail_offset": "0000000000000001_0000000000000000",
            "has_pending": True,
        }
    ]
    # Asynchronous completion through the callback, with the callback token.
    callback = {"wake_id": body["wake_id"], "generation": 1, "acks": [], "done": False}
    auth = {"Authorization": f"Bearer {body['callback_token']}"}
    assert http.post(body["callback_url"], json=callback).status_code == 401
    assert http.post(body["callback_url"], json=callback, headers=auth).json() == {"ok": True, "next_wake": False}
    ack = {"stream": "orders/1", "offset": body["streams"][0]["tail_offset"]}
    done = http.post(body["callback_url"], json=callback | {"acks": [ack], "done": True}, headers=auth)
    assert done.json() == {"ok": True, "next_wake": False}
    stale = http.post(body["callback_url"], json=callback, headers=auth)
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "FENCED"
    # The next append is a new wake with a new generation.
    assert http.post(server.stream_url("orders/1"), data=b'{"n":2}', headers=JSON).status_code == 204
    second = receiver.wait(2)[1].body
    assert second["generation"] == 2 and second["wake_id"] != body["wake_id"]
    assert verify_signature(receiver.received[1].raw, receiver.received[1].signature or "", jwks)


def test_failing_receiver_gets_retries_with_growing_delays(
    server_factory: Callable[..., ServerProcess], http: requests.Session, receiver: WebhookReceiver
) -> None:
    receiver.fail_first, receiver.answer = 4, {"done": True}
    server = server_factory(*LOOPBACK, *FAST_RETRIES)
    assert put_sub(http, server, "r", {"type": "webhook", "pattern": "*", "webhook": {"url": receiver.url}}).ok
    assert http.put(server.stream_url("s"), data=b"x", headers={"Content-Type": "text/plain"}).status_code == 201
    wait_for(lambda: http.get(sub_url(server, "r")).json()["status"] == "failed", timeout_s=5)
    attempts = receiver.wait(5)
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(attempts)]
    # 200 ms doubling, capped at 1 s, +-20 % jitter: each bound excludes its neighbours.
    for gap, low, high in zip(gaps, (0.16, 0.32, 0.64, 0.8), (0.3, 0.55, 1.1, 1.35), strict=True):
        assert low <= gap <= high, gaps
    assert {item.body["wake_id"] for item in attempts} == {attempts[0].body["wake_id"]}  # the same wake
    wait_for(lambda: http.get(sub_url(server, "r")).json()["streams"][0]["acked_offset"].startswith("0000000000000001"))
    assert http.get(sub_url(server, "r")).json()["status"] == "active"
    metrics = http.get(f"{server.url}/metrics").text
    assert "durable_streams_subscription_delivery_failures_total 4.0" in metrics
    assert "durable_streams_subscription_retries_total 4.0" in metrics


def test_pull_wake_claim_lease_expiry_and_fencing(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory()
    assert http.put(server.stream_url("wake"), data=b"[]", headers=JSON).status_code == 201
    body = {"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "wake", "lease_ttl_ms": 1000}
    assert put_sub(http, server, "p", body).status_code == 201
    assert http.post(sub_url(server, "p", "/claim"), json={"worker": "w1"}).status_code == 204  # nothing pending
    assert http.put(server.stream_url("jobs/1"), data=b"[1]", headers=JSON).status_code == 201
    wait_for(lambda: http.get(server.stream_url("wake") + "?offset=-1").json() != [])
    events = http.get(server.stream_url("wake") + "?offset=-1").json()
    assert [(e["type"], e["subscription_id"], e["stream"], e["generation"]) for e in events] == [
        ("wake", "p", "jobs/1", 1)
    ]
    claim = http.post(sub_url(server, "p", "/claim"), json={"worker": "w1"})
    claimed_by = time.monotonic()  # (the lease began before this)
    assert claim.status_code == 200
    claimed = claim.json()
    assert claimed["generation"] == 1 and claimed["lease_ttl_ms"] == 1000
    busy = http.post(sub_url(server, "p", "/claim"), json={"worker": "w2"})
    assert busy.status_code == 409
    assert busy.json()["error"] | {"message": ""} == {
        "code": "ALREADY_CLAIMED",
        "current_holder": "w1",
        "generation": 1,
        "message": "",
    }
    token = {"Authorization": f"Bearer {claimed['token']}"}
    heartbeat = {"wake_id": claimed["wake_id"], "generation": 1}
    # w1 heartbeats every quarter of its lease until half a lease past the claim's: each heartbeat
    # comes 0.75 s before the lease it extends runs out, however slow the machine is by a few
    # hundred ms. Then the first lease is over for sure, and the last heartbeat's is not.
    while True:
        heartbeat_sent = time.monotonic()
        assert http.post(sub_url(server, "p", "/ack"), json=heartbeat, headers=token).json() == {
            "ok": True,
            "next_wake": False,
        }
        if time.monotonic() > claimed_by + 1.5:
            break
        time.sleep(0.25)  # (a heartbeat every quarter lease: time is the schedule)
    busy = http.post(sub_url(server, "p", "/claim"), json={"worker": "w2"})
    answered = time.monotonic()
    assert busy.status_code == 409, busy.text
    assert answered - heartbeat_sent < 1.0, "the claim came after the last heartbeat's lease: nothing was checked"
    # w1 stops heartbeating: the lease expires (not before the last heartbeat's lease ends),
    # and the work is claimable again.
    deadline = time.monotonic() + 10
    while (reclaim := http.post(sub_url(server, "p", "/claim"), json={"worker": "w2"})).status_code == 409:
        assert reclaim.json()["error"]["current_holder"] == "w1", reclaim.text
        assert time.monotonic() < deadline, "the lease did not expire within 10 s"
        time.sleep(0.02)  # (the lease must expire: time itself is the condition, each claim checks it)
    assert time.monotonic() - heartbeat_sent >= 1.0 - 0.002  # (the server's clock counts whole ms)
    assert reclaim.status_code == 200, reclaim.text
    assert reclaim.json()["generation"] > 1
    late = http.post(sub_url(server, "p", "/ack"), json=heartbeat | {"done": True}, headers=token)
    assert late.status_code == 409 and late.json()["error"]["code"] == "FENCED"
    state = http.get(sub_url(server, "p")).json()
    assert state["streams"][0]["acked_offset"] == "0000000000000000_0000000000000000"  # nothing acked by w1
    new = reclaim.json()
    release = http.post(
        sub_url(server, "p", "/release"),
        json={"wake_id": new["wake_id"], "generation": new["generation"]},
        headers={"Authorization": f"Bearer {new['token']}"},
    )
    assert release.status_code == 204
    # Work still pending after the release: another wake event is written.
    wait_for(lambda: len(http.get(server.stream_url("wake") + "?offset=-1").json()) >= 2)
    assert "durable_streams_subscription_lease_expiries_total 1.0" in http.get(f"{server.url}/metrics").text


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with the default settings for the tests that use only their own subscription ids,
    stream names and bucket (no webhook is accepted by it: nothing is ever delivered)."""
    server = ServerProcess(tmp_path_factory.mktemp("plain") / "data").start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def loopback_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The operator flag allowing the loopback network, for every SSRF case (each case
    creates one subscription of its own id and no stream: nothing to deliver, nothing shared)."""
    server = ServerProcess(tmp_path_factory.mktemp("loopback") / "data", LOOPBACK).start()
    yield server
    server.kill()


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://10.0.0.1/hook", True),
        ("https://192.168.0.10/hook", True),
        ("https://172.16.0.1/hook", True),
        ("https://169.254.169.254/latest/meta-data", True),
        ("https://[fe80::1]/hook", True),
        ("https://[::1]/hook", False),
        ("http://127.0.0.1:9/hook", False),
        ("http://localhost/hook", False),
        ("http://93.184.216.34/hook", True),  # public, but not https
    ],
)
def test_ssrf_refusals(
    plain_server: ServerProcess, loopback_server: ServerProcess, http: requests.Session, url: str, allowed: bool
) -> None:
    """Refused without the operator flag; with it, only the listed loopback network passes."""
    plain, loopback_allowed = plain_server, loopback_server
    sub_id = f"x-{uuid.uuid4().hex[:12]}"  # (the servers serve every case: an id of its own)
    refusal = put_sub(http, plain, sub_id, {"type": "webhook", "pattern": "*", "webhook": {"url": url}})
    assert refusal.status_code == 400 and refusal.json()["error"]["code"] == "WEBHOOK_URL_REJECTED"
    answer = put_sub(http, loopback_allowed, sub_id, {"type": "webhook", "pattern": "*", "webhook": {"url": url}})
    expected = 400 if allowed or url.startswith("https://[::1]") else 201
    assert answer.status_code == expected, answer.text
    assert http.get(sub_url(plain, sub_id)).status_code == 404


def test_bucketed_surface_subscriptions_cover_their_bucket(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory()
    for bucket in ("bucket-one", "bucket-two"):
        assert http.put(f"{server.url}/{bucket}").status_code == 201
        assert http.put(f"{server.url}/{bucket}/wake", data=b"[]", headers=JSON).status_code == 201
    body = {"type": "pull-wake", "pattern": "*", "wake_stream": "wake"}
    assert http.put(f"{server.url}/bucket-one/__ds/subscriptions/b", json=body).status_code == 201
    assert http.put(f"{server.url}/bucket-two/orders", data=b"[1]", headers=JSON).status_code == 201
    assert http.put(f"{server.url}/bucket-one/orders", data=b"[1]", headers=JSON).status_code == 201
    wait_for(lambda: http.get(f"{server.url}/bucket-one/wake?offset=-1").json() != [])
    events = http.get(f"{server.url}/bucket-one/wake?offset=-1").json()
    assert [event["stream"] for event in events] == ["orders"]
    assert http.get(f"{server.url}/bucket-two/wake?offset=-1").json() == []
    assert http.get(f"{server.url}/bucket-two/__ds/subscriptions/b").status_code == 404
    assert http.get(f"{server.url}/no-such-bucket/__ds/jwks.json").status_code == 404
    jwks = json.loads(http.get(f"{server.url}/bucket-one/__ds/jwks.json").text)
    assert jwks == http.get(server.stream_url("__ds/jwks.json")).json()
