"""The base surface's subscriptions in a cluster of three shards, through a node that holds none.

Four nodes as real processes over one storage root on moto's S3: three hold one shard each,
the fourth (``front``) holds none and is the one every client request goes to. The
subscriptions live in their home shard (``v1/__ds``'s); their pattern matches a stream in every
shard, and the pull-wake subscription's wake stream lives in another shard than the home.
Checked as a user meets it: existing streams are linked at their tails (no replay), an append
in any shard wakes both subscriptions, acks move cursors, a stream created later in another
shard is linked at 0, a deleted one is unlinked, and after ``kill -9`` of the home's node the
subscriptions carry on at the shard's new server (its view of the other shards' streams
rebuilt from their full tail reports).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from cluster_support import JSON, Node, name_in_shard, send, serving, start_node
from servers import MotoServer, ServerProcess, wait_for
from webhook_receiver import WebhookReceiver

from durable_streams_server.cluster.paths import shard_of_key
from durable_streams_server.protocol.offsets import encode_seq

pytestmark = pytest.mark.slow

SHARDS = 3
LOOPBACK = ("--allow-private-webhook-urls", "127.0.0.0/8")


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    started = WebhookReceiver(answer={"done": True}).start()
    yield started
    started.stop()


def _cluster(factory: Callable[..., ServerProcess], moto: MotoServer, tmp: Path) -> tuple[list[Node], Node]:
    bucket = f"subs-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    storage = [*moto.server_args(f"s3://{bucket}/root"), "--shards", str(SHARDS), "--lease-ttl-s", "3"]
    storage += ["--durability", "delta", *LOOPBACK]  # (a WAL-acknowledging node keeps its shards until it returns)
    owners = [start_node(factory, storage, f"n{index}", tmp) for index in range(SHARDS)]
    wait_for(serving(owners, SHARDS), message=lambda: str([node.describe() for node in owners]), timeout_s=60)
    front = start_node(factory, storage, "front", tmp)
    wait_for(lambda: len(owners[0].describe()["live_nodes"]) == SHARDS + 1, timeout_s=60)  # type: ignore[arg-type]
    wait_for(serving([*owners, front], SHARDS), timeout_s=60)
    assert front.shards_held() == []
    return owners, front


class Client:
    """What a user does, all through one node."""

    def __init__(self, node: Node) -> None:
        self.url = node.url
        self.base = f"{node.url}/v1/stream/"
        self.http = requests.Session()
        self.http.trust_env = False

    def send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """One request, asked again while its shard moves (``cluster_support.send``; a move on a
        loaded machine starts shard servers slowly)."""
        return send(method, url, http=self.http, moving_s=180, **kwargs)

    def put_stream(self, path: str) -> None:
        answer = self.send("PUT", self.base + path, headers=JSON)
        assert answer.status_code == 201, answer.text

    def append(self, path: str, n: int) -> None:
        answer = self.send("POST", self.base + path, data=json.dumps({"n": n}), headers=JSON)
        assert answer.status_code in (200, 204), answer.text

    def put_sub(self, sub_id: str, body: dict[str, Any]) -> None:
        answer = self.send("PUT", self.sub(sub_id), json=body)
        assert answer.status_code == 201, answer.text

    def sub(self, sub_id: str, suffix: str = "") -> str:
        return f"{self.base}__ds/subscriptions/{sub_id}{suffix}"

    def links(self, sub_id: str) -> dict[str, str]:
        """path -> acked offset; {} while the subscription cannot be read (its shard moving)."""
        answer = self.http.get(self.sub(sub_id), timeout=30)
        if answer.status_code == 503:
            return {}
        assert answer.status_code == 200, answer.text
        return {item["path"]: item["acked_offset"] for item in answer.json()["streams"]}

    def claim(self, sub_id: str) -> dict[str, Any] | None:
        answer = self.http.post(self.sub(sub_id, "/claim"), json={"worker": "w1"}, timeout=30)
        if answer.status_code in (204, 503):
            return None
        assert answer.status_code == 200, answer.text
        claimed: dict[str, Any] = answer.json()
        return claimed

    def ack_all(self, sub_id: str, claimed: dict[str, Any]) -> None:
        acks = [{"stream": view["path"], "offset": view["tail_offset"]} for view in claimed["streams"]]
        body = {"wake_id": claimed["wake_id"], "generation": claimed["generation"], "acks": acks, "done": True}
        auth = {"Authorization": f"Bearer {claimed['token']}"}
        answer = self.send("POST", self.sub(sub_id, "/ack"), json=body, headers=auth)
        assert answer.status_code == 200, answer.text

    def pending_on_status_page(self, shard: int, sub_id: str) -> int | None:
        """The status page's count of ``sub_id``'s streams with pending work, as shard ``shard``'s
        server shows it (``None`` while that server cannot answer: its shard moving)."""
        answer = self.http.get(f"{self.url}/v1/status/subscriptions", params={"shard": shard}, timeout=30)
        if answer.status_code == 503:
            return None
        assert answer.status_code == 200, answer.text
        rows = [row for row in answer.json()["subscriptions"] if row["id"] == sub_id]
        return int(rows[0]["pending_streams"]) if rows else None

    def wake_events(self, path: str) -> list[dict[str, Any]]:
        answer = self.http.get(self.base + path, params={"offset": "-1"}, timeout=30)
        if answer.status_code == 503:
            return []
        assert answer.status_code == 200, answer.text
        events: list[dict[str, Any]] = answer.json()
        return events


def _pending_in_claim(client: Client, sub_id: str, wanted: set[str]) -> Callable[[], bool]:
    """Claims (acking everything each shows) until every path in ``wanted`` was shown pending."""
    seen: set[str] = set()

    def check() -> bool:
        claimed = client.claim(sub_id)
        if claimed is not None:
            seen.update(view["path"] for view in claimed["streams"] if view["has_pending"])
            client.ack_all(sub_id, claimed)
        return wanted <= seen

    return check


def _delivered(receiver: WebhookReceiver, path: str, tail: int) -> Callable[[], bool]:
    """A webhook wake showed ``path`` pending up to ``tail``."""

    def check() -> bool:
        for item in list(receiver.received):
            for view in item.body["streams"]:
                if view["path"] == path and view["has_pending"] and view["tail_offset"] == encode_seq(tail):
                    return True
        return False

    return check


def test_base_surface_subscriptions_span_every_shard(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path, receiver: WebhookReceiver
) -> None:
    owners, front = _cluster(server_factory, moto, tmp_path)
    client = Client(front)
    home = shard_of_key("v1/__ds", SHARDS)
    streams = {shard: f"{name_in_shard(shard, SHARDS, 'sub')}/jobs" for shard in range(SHARDS)}
    for shard, path in streams.items():
        client.put_stream(path)
        for n in range(shard + 1):
            client.append(path, n)
    wake_stream = name_in_shard((home + 1) % SHARDS, SHARDS, "wake")
    client.put_stream(wake_stream)

    # the internal endpoints answer only the cluster itself
    internal = client.send("GET", f"{front.url}/v1/internal/interest", params={"shard": home})
    assert internal.status_code == 403, internal.text

    # existing streams of every shard are linked at their tails: nothing is replayed
    pull = {"type": "pull-wake", "pattern": "*/jobs", "wake_stream": wake_stream}
    client.put_sub("pull", pull)
    hook = {"type": "webhook", "pattern": "*/jobs", "webhook": {"url": receiver.url}}
    client.put_sub("hook", hook)
    at_tails = {path: encode_seq(shard + 1) for shard, path in streams.items()}
    assert client.links("pull") == at_tails and client.links("hook") == at_tails
    assert client.claim("pull") is None
    assert receiver.received == []

    # an append in every shard wakes both; the worker's acks (and the webhook's done) move the cursors
    for shard, path in streams.items():
        client.append(path, 100 + shard)
    # the home shard's status page counts each as pending, the other shards' by their reports
    wait_for(lambda: client.pending_on_status_page(home, "pull") == SHARDS, timeout_s=30)
    wait_for(_pending_in_claim(client, "pull", set(streams.values())), timeout_s=30)
    for shard, path in streams.items():
        wait_for(_delivered(receiver, path, shard + 2), timeout_s=30)
    moved = {path: encode_seq(shard + 2) for shard, path in streams.items()}
    wait_for(lambda: client.links("pull") == moved and client.links("hook") == moved, timeout_s=30)

    # a stream created later in another shard than the home is linked at 0; deleting it unlinks it
    late = f"{name_in_shard((home + 2) % SHARDS, SHARDS, 'late')}/jobs"
    client.put_stream(late)
    client.append(late, 0)
    wait_for(lambda: client.links("pull").get(late) == encode_seq(0), timeout_s=30)
    # (its wake event went to the wake stream, in another shard than the home, before any claim)
    wait_for(lambda: late in {event["stream"] for event in client.wake_events(wake_stream)}, timeout_s=30)
    wait_for(_pending_in_claim(client, "pull", {late}), timeout_s=30)
    wait_for(_delivered(receiver, late, 1), timeout_s=30)
    assert client.send("DELETE", client.base + late).status_code == 204
    wait_for(lambda: late not in client.links("pull") and late not in client.links("hook"), timeout_s=30)

    # kill -9 of the home's node: the home shard moves, the other shards report to its new server
    victim = next(node for node in owners if home in node.shards_held())
    victim.kill()
    survivors = [node for node in (*owners, front) if node is not victim]
    wait_for(lambda: any(home in node.shards_held() for node in survivors), timeout_s=180)
    wait_for(serving(survivors, SHARDS), timeout_s=180)  # (and the survivors done rebalancing: front takes a share)
    for shard, path in streams.items():
        if shard != home:  # (the home shard's own stream moved with it)
            client.append(path, 200 + shard)
    after = {path for shard, path in streams.items() if shard != home}
    wait_for(_pending_in_claim(client, "pull", after), timeout_s=180)
    for shard, path in streams.items():
        if shard != home:
            wait_for(_delivered(receiver, path, shard + 3), timeout_s=180)
    expected = {path: encode_seq(shard + (3 if shard != home else 2)) for shard, path in streams.items()}
    wait_for(lambda: client.links("pull") == expected and client.links("hook") == expected, timeout_s=180)

    # a worker that appends in another shard than the home and then claims sees its append at once
    # (the home asks that shard for its tail instead of waiting for the report)
    other = streams[(home + 1) % SHARDS]
    client.append(other, 300)
    claimed = client.claim("pull")
    assert claimed is not None
    assert [(view["path"], view["tail_offset"]) for view in claimed["streams"] if view["has_pending"]] == [
        (other, encode_seq((home + 1) % SHARDS + 4))
    ]
    client.ack_all("pull", claimed)
