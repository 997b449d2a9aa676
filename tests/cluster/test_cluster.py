"""A cluster on loopback: three nodes as real processes over one storage root on moto's S3.

Each node holds shard leases (conditional writes on S3) and serves its shards with shard
servers of its own; any node answers any stream URL with a 307 to the shard's server.
Checked here as a user meets it: any node serves any URL (streams, buckets, listings), a
node killed with ``kill -9`` under load loses nothing acknowledged (``--durability delta``),
a paused owner acknowledges nothing that is later missing, shards move to a node that joins
while appends go on, and a node that acknowledged from its WAL keeps its shards until it
comes back, with everything it acknowledged.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from cluster_support import (
    JSON,
    Node,
    ProducerAppender,
    check_history,
    history,
    name_in_shard,
    send,
    serving,
    shard_servers,
    start_node,
)
from servers import MotoServer, ServerProcess, wait_for

from durable_streams_server.cluster.paths import shard_of_key

pytestmark = pytest.mark.slow


def _root(moto: MotoServer) -> list[str]:
    bucket = f"cluster-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    return moto.server_args(f"s3://{bucket}/root")


def _cluster(
    factory: Callable[..., ServerProcess], moto: MotoServer, tmp: Path, count: int, shards: int, durability: str
) -> list[Node]:
    storage = [*_root(moto), "--shards", str(shards), "--durability", durability, "--lease-ttl-s", "3"]
    nodes = [start_node(factory, storage, f"n{index}", tmp) for index in range(count)]
    wait_for(serving(nodes, shards), message=lambda: str([node.describe() for node in nodes]), timeout_s=60)
    return nodes


def _owner(nodes: list[Node], shard: int) -> Node:
    for node in nodes:
        if shard in node.shards_held():
            return node
    raise AssertionError(f"no node holds shard {shard}")


def test_any_node_answers_any_url(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    nodes = _cluster(server_factory, moto, tmp_path, 3, 3, "wal")
    assert sorted(len(node.shards_held()) for node in nodes) == [1, 1, 1]
    for node in nodes:  # (a load balancer's probe: every node is ready, and can reach every shard)
        ready = requests.get(f"{node.url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["serving"] == 3, ready.text
    for shard in range(3):
        name = name_in_shard(shard, 3, "any")
        assert requests.put(f"{nodes[0].url}/v1/stream/{name}", headers=JSON, timeout=30).status_code == 201
        for n in range(5):
            answer = requests.post(f"{nodes[1].url}/v1/stream/{name}", data=b'{"n": %d}' % n, headers=JSON, timeout=30)
            assert answer.status_code in (200, 204), answer.text
        assert history(f"{nodes[2].url}/v1/stream/{name}") == list(range(5))
        # the answer named the shard's server, which the node holding the shard runs
        moved = requests.get(f"{nodes[2].url}/v1/stream/{name}", allow_redirects=False, timeout=30)
        assert moved.status_code == 307
        assert moved.headers["Location"].endswith(f"/v1/stream/{name}")
        owner_view = _owner(nodes, shard).describe()
        assert owner_view["shards"][shard]["url"] == moved.headers["Location"].split("/v1/")[0]  # type: ignore[index]

    # a bucket lives in one shard: created, filled and listed through three different nodes
    bucket = f"bk-{uuid.uuid4().hex[:10]}"
    assert requests.put(f"{nodes[1].url}/{bucket}", timeout=30).status_code == 201
    for stream in ("a", "b", "c"):
        answer = requests.put(f"{nodes[2].url}/{bucket}/{stream}", headers=JSON, timeout=30)
        assert answer.status_code == 201, answer.text
    listing = requests.get(f"{nodes[0].url}/{bucket}/streams", timeout=30)
    assert listing.status_code == 200, listing.text
    assert sorted(entry["stream_id"] for entry in listing.json()["streams"]) == ["a", "b", "c"]

    # a shard server sends another shard's path back to its node's router, storing nothing
    first, other = name_in_shard(0, 3, "guard"), name_in_shard(1, 3, "guard")
    guarded = _owner(nodes, 0)
    server_url = guarded.describe()["shards"][0]["url"]  # type: ignore[index]
    back = requests.put(f"{server_url}/v1/stream/{other}?x=1", headers=JSON, allow_redirects=False, timeout=30)
    assert back.status_code == 307 and back.json()["error"]["code"] == "MOVED"
    assert back.headers["Location"] == f"{guarded.url}/v1/stream/{other}?x=1"  # (its own node's router)
    assert requests.head(f"{nodes[0].url}/v1/stream/{other}", allow_redirects=True, timeout=30).status_code == 404

    # a fork of another shard's stream is made (a copy: test_cross_shard_forks.py), one of its own shard too
    assert requests.put(f"{nodes[0].url}/v1/stream/{first}", headers=JSON, timeout=30).status_code == 201
    fork = requests.put(
        f"{nodes[1].url}/v1/stream/{other}", headers={**JSON, "Stream-Forked-From": f"/v1/stream/{first}"}, timeout=30
    )
    assert fork.status_code == 201, fork.text
    same_key = requests.put(
        f"{nodes[1].url}/v1/stream/{first}/fork", headers={**JSON, "Stream-Forked-From": f"/v1/stream/{first}"}
    )
    assert same_key.status_code == 201, same_key.text
    # the base surface's subscriptions live in one shard and see every shard's streams
    # (tests/cluster/test_cluster_subscriptions.py); none is created while a shard cannot list its own
    subscriptions = f"{nodes[2].url}/v1/stream/__ds/subscriptions/x"
    missing = requests.get(subscriptions, timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "SUBSCRIPTION_NOT_FOUND", missing.text
    home = shard_of_key("v1/__ds", 3)
    victim = next(node for node in nodes if home not in node.shards_held())
    victim.kill()  # (WAL durability: its shard waits for it, answering 503)
    front = next(node for node in nodes if node is not victim)
    body = {"type": "pull-wake", "pattern": "**", "wake_stream": "w"}
    refused = requests.put(f"{front.url}/v1/stream/__ds/subscriptions/x", json=body, timeout=60)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "SHARD_UNAVAILABLE", refused.text
    assert refused.headers["Retry-After"] == "1"
    assert requests.get(f"{front.url}/v1/stream/__ds/subscriptions/x", timeout=30).status_code == 404


def test_kill_9_of_an_owner_under_appends_loses_nothing(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    nodes = _cluster(server_factory, moto, tmp_path, 3, 3, "delta")
    victim, front, reader = nodes
    shard = victim.shards_held()[0]
    names = [name_in_shard(shard, 3, f"kill{index}") for index in range(2)]
    for name in names:
        assert requests.put(f"{front.url}/v1/stream/{name}", headers=JSON, timeout=30).status_code == 201
    appenders = [ProducerAppender(f"{front.url}/v1/stream/{name}", f"p-{name}", 1000) for name in names]
    for appender in appenders:
        appender.start()
    wait_for(
        lambda: all(len(appender.acknowledged) >= 15 for appender in appenders),
        timeout_s=180,
        message=lambda: str([(len(appender.acknowledged), appender.refusals) for appender in appenders]),
    )

    servers = victim.kill()
    wait_for(lambda: all(not Path(f"/proc/{pid}").exists() for pid in servers), timeout_s=10)  # they died with it
    wait_for(lambda: shard in front.shards_held() + reader.shards_held(), timeout_s=60)  # (ttl 3 s: ~5-10 s here)
    taker = front if shard in front.shards_held() else reader
    acquired = [line for line in taker.process.log_text().splitlines() if 'msg="shard acquired"' in line]
    # an expired lease: its holder's servers are gone, so the new one claims without waiting for them
    assert any(f"from={victim.node_id}" in line and "owner_wait_s=0.0" in line for line in acquired), acquired
    started = [line for line in taker.process.log_text().splitlines() if 'msg="shard server starting"' in line]
    assert f"shard={shard} " in started[-1] and "spare=True" in started[-1], started  # imports done before
    acknowledged_at_kill = [len(appender.acknowledged) for appender in appenders]
    wait_for(
        lambda: all(len(a.acknowledged) >= n + 10 for a, n in zip(appenders, acknowledged_at_kill, strict=True)),
        timeout_s=180,
    )
    for appender in appenders:
        appender.stopping.set()
        appender.join(timeout=60)
        assert not appender.is_alive()
    for name, appender in zip(names, appenders, strict=True):
        check_history(appender.acknowledged, history(f"{reader.url}/v1/stream/{name}"))


def test_a_paused_owner_acknowledges_nothing_that_is_later_missing(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    nodes = _cluster(server_factory, moto, tmp_path, 2, 2, "delta")
    paused, front = nodes
    shard = paused.shards_held()[0]
    name = name_in_shard(shard, 2, "pause")
    assert requests.put(f"{front.url}/v1/stream/{name}", headers=JSON, timeout=30).status_code == 201
    old_server = paused.describe()["shards"][shard]["url"]  # type: ignore[index]
    appender = ProducerAppender(f"{front.url}/v1/stream/{name}", "p-front", 1000)
    appender.start()
    wait_for(lambda: len(appender.acknowledged) >= 15, timeout_s=180)

    paused.pause()
    try:
        wait_for(lambda: shard in front.shards_held(), timeout_s=30)
        wait_for(lambda: len(appender.acknowledged) >= 30, timeout_s=180)
    finally:  # (a node killed stopped leaves its spare stopped for the rest of the run, its pipe unread)
        paused.resume()
    # straight to the old shard server, as a client that kept its URL would: nothing it says
    # it acknowledged may be missing afterwards
    stale: list[int] = []
    for n in range(1000, 1020):
        try:
            answer = requests.post(f"{old_server}/v1/stream/{name}", data=b'{"n": %d}' % n, headers=JSON, timeout=10)
        except requests.ConnectionError:
            continue
        if answer.status_code in (200, 204) and not answer.history:
            stale.append(n)
    wait_for(lambda: len(appender.acknowledged) >= 40, timeout_s=180)
    appender.stopping.set()
    appender.join(timeout=60)
    read = history(f"{front.url}/v1/stream/{name}")
    check_history(appender.acknowledged, [n for n in read if n < 1000])
    assert set(stale) <= set(read), f"the paused owner acknowledged {sorted(set(stale) - set(read))}, now missing"

    def old_server_gone() -> bool:
        try:
            requests.get(f"{old_server}/healthz", timeout=2)
        except requests.ConnectionError:
            return True
        return False

    wait_for(old_server_gone, timeout_s=10)  # its lease's validity ended while it was stopped: killed


def test_a_shard_server_whose_node_is_paused_stops_once_another_owns_its_shard(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    """Its node stopped alone (SIGSTOP), the shard server runs on, no watchdog left to kill it.
    The node that takes the expired lease claims the shard's storage, so the old server is
    fenced: it exits, where it would answer ``NOT_OWNER`` (and stale reads) to every client that
    kept its URL until its node ran again."""
    nodes = _cluster(server_factory, moto, tmp_path, 2, 2, "delta")
    paused, front = nodes
    shard = paused.shards_held()[0]
    name = name_in_shard(shard, 2, "fenced")
    assert requests.put(f"{front.url}/v1/stream/{name}", headers=JSON, timeout=30).status_code == 201
    acknowledged = []
    for n in range(5):
        answer = send("POST", f"{front.url}/v1/stream/{name}", data=b'{"n": %d}' % n, headers=JSON)
        assert answer.status_code in (200, 204), answer.text
        acknowledged.append(n)
    assert paused.process.proc is not None
    old_servers = shard_servers(paused.process.proc.pid)
    assert len(old_servers) == 1, old_servers
    os.kill(paused.process.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: shard in front.shards_held(), timeout_s=60)
        wait_for(lambda: not Path(f"/proc/{old_servers[0]}").exists() or _zombie(old_servers[0]), timeout_s=30)
        for n in range(5, 10):
            answer = send("POST", f"{front.url}/v1/stream/{name}", data=b'{"n": %d}' % n, headers=JSON)
            assert answer.status_code in (200, 204), answer.text
            acknowledged.append(n)
    finally:
        os.kill(paused.process.proc.pid, signal.SIGCONT)
    check_history(acknowledged, history(f"{front.url}/v1/stream/{name}"))
    wait_for(serving(nodes, 2), timeout_s=60)  # the node back: the shards balance again, one each
    check_history(acknowledged, history(f"{paused.url}/v1/stream/{name}"))


def _zombie(pid: int) -> bool:
    """Exited, not yet reaped (its parent, the paused node, cannot wait for it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (FileNotFoundError, IndexError):
        return True
