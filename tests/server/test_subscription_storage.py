"""Subscriptions are stored like streams: records in the WAL, ``subscription`` rows in Delta.

A stateless server on S3 (``--durability delta``) restarted on a fresh data dir gets every
subscription, its signing keys and the delivery in flight back from Delta; in WAL mode the
state outlives the WAL once flushed, and a deleted subscription stays deleted."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from typing import Any

import requests
from deltalake import DeltaTable
from servers import MotoServer, ServerProcess, wait_for
from webhook_receiver import WebhookReceiver, verify_signature

LOOPBACK = ("--allow-private-webhook-urls", "127.0.0.0/8")
FAST_RETRIES = ("--webhook-retry-initial-ms", "200", "--webhook-retry-max-ms", "400")
TEXT = {"Content-Type": "text/plain"}
JSON = {"Content-Type": "application/json"}


def sub_url(server: ServerProcess, sub_id: str, suffix: str = "") -> str:
    return server.stream_url(f"__ds/subscriptions/{sub_id}{suffix}")


def offset(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


def subscription_rows(uri: str, storage_options: dict[str, str] | None = None) -> list[tuple[str, Any]]:
    """(stream, state) of every ``subscription`` row of the Delta table, in LSN order."""
    table = DeltaTable(f"{uri}/streams", storage_options=storage_options).to_pyarrow_table(
        columns=["stream", "kind", "lsn", "meta"]
    )
    rows = sorted(
        (lsn, stream, meta)
        for stream, kind, lsn, meta in zip(*(table[name].to_pylist() for name in table.column_names), strict=True)
        if kind == "subscription"
    )
    return [(stream, json.loads(meta) if meta is not None else None) for _, stream, meta in rows]


def claim_and_ack(http: requests.Session, server: ServerProcess, acked: int) -> dict[str, Any]:
    claimed: dict[str, Any] = http.post(sub_url(server, "pull", "/claim"), json={"worker": "w1"}).json()
    wake = {"wake_id": claimed["wake_id"], "generation": claimed["generation"]}
    ack = {"acks": [{"stream": "a", "offset": offset(acked)}]}
    answer = http.post(sub_url(server, "pull", "/ack"), json=wake | ack, headers=_bearer(claimed["token"]))
    assert answer.json() == {"ok": True, "next_wake": False}
    return claimed


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def create_pull_subscription(http: requests.Session, server: ServerProcess) -> None:
    assert http.put(server.stream_url("wake"), data=b"[]", headers=JSON).status_code == 201
    body = {"type": "pull-wake", "streams": ["a"], "wake_stream": "wake", "lease_ttl_ms": 60_000}
    assert http.put(sub_url(server, "pull"), json=body).status_code == 201
    assert http.put(server.stream_url("a"), data=b"x", headers=TEXT).status_code == 201
    assert http.post(server.stream_url("a"), data=b"y", headers=TEXT).status_code == 204


def assert_claim_survived(http: requests.Session, server: ServerProcess, claimed: dict[str, Any], acked: int) -> None:
    state = http.get(sub_url(server, "pull")).json()
    assert [(item["path"], item["acked_offset"]) for item in state["streams"]] == [("a", offset(acked))]
    busy = http.post(sub_url(server, "pull", "/claim"), json={"worker": "w2"})
    assert busy.status_code == 409
    assert busy.json()["error"]["current_holder"] == "w1"
    assert busy.json()["error"]["generation"] == claimed["generation"]
    wake = {"wake_id": claimed["wake_id"], "generation": claimed["generation"]}
    done = {"acks": [{"stream": "a", "offset": offset(2)}], "done": True}
    answer = http.post(sub_url(server, "pull", "/ack"), json=wake | done, headers=_bearer(claimed["token"]))
    assert answer.json() == {"ok": True, "next_wake": False}  # the claim token (its key) survived too


def test_a_server_on_s3_with_delta_durability_restores_subscriptions_on_a_fresh_data_dir(
    server_factory: Callable[..., ServerProcess], http: requests.Session, moto: MotoServer
) -> None:
    bucket = f"subscriptions-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    uri = f"s3://{bucket}/durable-streams"
    args = (*LOOPBACK, *FAST_RETRIES, "--durability", "delta", *moto.server_args(uri))
    receiver = WebhookReceiver(fail_first=10**6).start()
    try:
        server = server_factory(*args)
        body = {"type": "webhook", "pattern": "events/*", "webhook": {"url": receiver.url}}
        kid = http.put(sub_url(server, "hook"), json=body).json()["webhook"]["signing"]["kid"]
        create_pull_subscription(http, server)
        claimed = claim_and_ack(http, server, acked=1)
        assert http.put(server.stream_url("events/1"), data=b"e", headers=TEXT).status_code == 201
        wake_id = receiver.wait(2)[0].body["wake_id"]  # failing: the delivery stays in flight
        server.kill()
        assert not (server.data_dir / "subscriptions").exists()  # no local state file
        names = {name for name, _ in subscription_rows(uri, moto.storage_options())}
        assert names == {"v1/stream/__ds/subscriptions/hook", "v1/stream/__ds/subscriptions/pull", "__ds/signing-keys"}

        receiver.fail_first, receiver.answer = 0, {"done": True}
        receiver.received.clear()
        # A new process on a new, empty data dir (taking over from the killed one): everything from Delta.
        fresh = server_factory(*args, "--take-over", "--take-over-timeout-s", "1")
        assert fresh.data_dir != server.data_dir
        (delivered, *_) = receiver.wait(1)
        jwks = http.get(fresh.stream_url("__ds/jwks.json")).json()
        assert [key["kid"] for key in jwks["keys"]] == [kid]
        assert delivered.signature is not None and verify_signature(delivered.raw, delivered.signature, jwks)
        assert (delivered.body["wake_id"], delivered.body["generation"]) == (wake_id, 1)  # the same wake, again
        wait_for(lambda: http.get(sub_url(fresh, "hook")).json()["streams"][0]["acked_offset"] == offset(1))
        assert_claim_survived(http, fresh, claimed, acked=1)
    finally:
        receiver.stop()


def test_subscription_rows_outlive_the_wal_and_deletions_stay(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory("--flush-interval-ms", "50")
    jwks = http.get(server.stream_url("__ds/jwks.json")).json()
    create_pull_subscription(http, server)
    claimed = claim_and_ack(http, server, acked=2)
    gone = {"type": "pull-wake", "pattern": "**", "wake_stream": "wake"}
    assert http.put(sub_url(server, "gone"), json=gone).status_code == 201
    assert http.delete(sub_url(server, "gone")).status_code == 204
    uri = str(server.data_dir / "delta")
    # The deletion is the newest record: once its row is in Delta, everything before it is.
    wait_for(lambda: ("v1/stream/__ds/subscriptions/gone", None) in subscription_rows(uri))
    server.kill()
    shutil.rmtree(server.data_dir / "wal")  # (flushed: nothing in it is needed any more)
    server.start()
    assert http.get(server.stream_url("__ds/jwks.json")).json() == jwks
    assert http.get(sub_url(server, "gone")).status_code == 404
    state = http.get(sub_url(server, "pull")).json()
    assert [(item["path"], item["acked_offset"]) for item in state["streams"]] == [("a", offset(2))]
    busy = http.post(sub_url(server, "pull", "/claim"), json={"worker": "w2"})
    assert (busy.status_code, busy.json()["error"]["current_holder"]) == (409, "w1")
    release = {"wake_id": claimed["wake_id"], "generation": claimed["generation"]}
    assert http.post(sub_url(server, "pull", "/release"), json=release, headers=_bearer(claimed["token"])).ok
    recreated = http.put(sub_url(server, "gone"), json=gone)
    assert recreated.status_code == 201 and recreated.json()["generation"] == 0  # a new subscription
