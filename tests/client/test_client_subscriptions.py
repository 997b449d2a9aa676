"""The client's subscription helpers against our server: management, the pull-wake worker,
and webhook signatures verified with the JWKS."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from servers import ServerProcess
from webhook_receiver import WebhookReceiver

from pyspark_durable_streams.client import Client, Conflict, Message, NotFound, PullWakeWorker, verify_webhook_signature


def test_create_read_membership_delete(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory()
    with Client(server.url) as client:
        subs = client.subscriptions()
        client.stream("v1/stream/wake").create(content_type="application/json")
        config = {"type": "pull-wake", "streams": ["a"], "wake_stream": "wake"}
        created, sub = subs.create("s1", config)
        assert (created, sub["subscription_id"], sub["type"]) == (True, "s1", "pull-wake")
        assert subs.create("s1", config)[0] is False  # re-confirmed
        with pytest.raises(Conflict) as refused:
            subs.create("s1", config | {"lease_ttl_ms": 5_000})
        assert refused.value.code == "SUBSCRIPTION_EXISTS"
        subs.add_streams("s1", ["b/c"])
        assert [item["path"] for item in subs.get("s1")["streams"]] == ["a", "b/c"]
        subs.remove_stream("s1", "a")
        assert [item["path"] for item in subs.get("s1")["streams"]] == ["b/c"]
        subs.delete("s1")
        with pytest.raises(NotFound) as missing:
            subs.get("s1")
        assert missing.value.code == "SUBSCRIPTION_NOT_FOUND"


def test_pull_wake_worker_reads_acks_and_releases_on_failure(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory()
    with Client(server.url) as client:
        subs = client.subscriptions()
        client.stream("v1/stream/wake").create(content_type="application/json")
        events = client.stream("v1/stream/events/1")
        events.create(content_type="text/plain")
        subs.create("p", {"type": "pull-wake", "pattern": "events/*", "wake_stream": "wake"})
        events.append(b"one")
        events.append(b"two")

        def failing(path: str, messages: list[Message]) -> None:
            raise RuntimeError("worker crashed")

        with pytest.raises(RuntimeError):
            PullWakeWorker(subs, "p", "w1", failing).run_once()
        seen: list[tuple[str, bytes]] = []

        def handle(path: str, messages: list[Message]) -> None:
            seen.extend((path, message.data) for message in messages)

        worker = PullWakeWorker(subs, "p", "w2", handle)  # claimable at once: w1 released it
        assert worker.run_once() is True
        assert seen == [("events/1", b"one"), ("events/1", b"two")]
        (linked,) = subs.get("p")["streams"]
        assert linked["acked_offset"] == events.metadata().next_offset
        assert worker.run_once() is False  # nothing pending
        events.append(b"three")
        assert worker.run_once() is True
        assert seen[-1] == ("events/1", b"three")


def test_webhook_signatures_verify_against_the_jwks(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory("--allow-private-webhook-urls", "127.0.0.0/8")
    receiver = WebhookReceiver(answer={"done": True}).start()
    try:
        with Client(server.url) as client:
            subs = client.subscriptions()
            subs.create("hook", {"type": "webhook", "pattern": "*", "webhook": {"url": receiver.url}})
            client.stream("v1/stream/s").create(content_type="text/plain", data=b"x")
            (delivery,) = receiver.wait(1)
            jwks = subs.jwks()
        assert delivery.signature is not None
        assert verify_webhook_signature(delivery.raw, delivery.signature, jwks)
        assert not verify_webhook_signature(delivery.raw + b" ", delivery.signature, jwks)  # altered body
        assert not verify_webhook_signature(delivery.raw, delivery.signature, {"keys": []})  # unknown key
        signed_at = int(dict(part.split("=", 1) for part in delivery.signature.split(","))["t"])
        assert not verify_webhook_signature(delivery.raw, delivery.signature, jwks, now=signed_at + 301)  # replay
        assert not verify_webhook_signature(delivery.raw, "t=1,garbage", jwks)
    finally:
        receiver.stop()
