"""Shards that move, and shards that must not: rebalancing under load, a WAL node's death,
and a single server's storage location opened by a cluster node.

- A node that joins takes its share of shards while appends go on through another node:
  the old owner drains (flushes, releases), the new one replays nothing it lacks, and the
  checker finds 0 lost, 0 duplicated, 0 reordered.
- A node that acknowledged from its WAL and is killed keeps its shards: no other node takes
  them (they answer 503, naming the shard), and when it comes back, everything it
  acknowledged is there.
- A location written by today's single server, killed with ``kill -9`` (its WAL holding
  records), opens under a cluster node as one shard, with every acknowledged record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from cluster_support import (
    JSON,
    ProducerAppender,
    check_history,
    history,
    name_in_shard,
    serving,
    start_node,
)
from servers import ServerProcess, wait_for

pytestmark = pytest.mark.slow


def test_a_joining_node_takes_its_share_under_load(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "4", "--lease-ttl-s", "2"]
    first = [start_node(server_factory, storage, f"n{index}", tmp_path) for index in range(2)]
    wait_for(serving(first, 4), timeout_s=60)
    names = [name_in_shard(shard, 4, "move") for shard in range(4)]
    for name in names:
        assert requests.put(f"{first[0].url}/v1/stream/{name}", headers=JSON, timeout=30).status_code == 201
    appenders = [ProducerAppender(f"{first[0].url}/v1/stream/{name}", f"p-{name}", 100_000) for name in names]
    for appender in appenders:
        appender.start()
    wait_for(lambda: all(len(appender.acknowledged) >= 20 for appender in appenders), timeout_s=180)

    joined = start_node(server_factory, storage, "n2", tmp_path)
    nodes = [*first, joined]
    wait_for(lambda: len(joined.shards_held()) >= 1 and serving(nodes, 4)(), timeout_s=60)
    assert sorted(len(node.shards_held()) for node in nodes) == [1, 1, 2]
    counts = [len(appender.acknowledged) for appender in appenders]
    wait_for(lambda: all(len(a.acknowledged) >= n + 20 for a, n in zip(appenders, counts, strict=True)), timeout_s=180)
    for appender in appenders:
        appender.stopping.set()
        appender.join(timeout=60)
    for name, appender in zip(names, appenders, strict=True):
        check_history(appender.acknowledged, history(f"{joined.url}/v1/stream/{name}"))


def test_a_wal_node_that_dies_keeps_its_shards_until_it_returns(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "3"]
    storage += ["--durability", "wal", "--flush-interval-ms", "600000"]  # (everything stays in the WAL)
    nodes = [start_node(server_factory, storage, f"n{index}", tmp_path) for index in range(2)]
    wait_for(serving(nodes, 2), timeout_s=60)
    dying, other = nodes
    shard = dying.shards_held()[0]
    name = name_in_shard(shard, 2, "wal")
    assert requests.put(f"{other.url}/v1/stream/{name}", headers=JSON, timeout=30).status_code == 201
    for n in range(20):
        answer = requests.post(f"{other.url}/v1/stream/{name}", data=b'{"n": %d}' % n, headers=JSON, timeout=30)
        assert answer.status_code in (200, 204), answer.text

    dying.kill()
    time.sleep(3 * 3)  # three lease ttls: long past the moment a delta-durability shard would move
    assert shard not in other.shards_held()
    view = other.describe()["shards"][shard]  # type: ignore[index]
    assert (view["state"], view["holder"]) == ("unavailable", "n0")
    refused = requests.get(f"{other.url}/v1/stream/{name}", params={"offset": "-1"}, timeout=30)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "SHARD_UNAVAILABLE"
    assert refused.headers["Retry-After"] == "1"

    dying.process.start()
    wait_for(serving(nodes, 2), timeout_s=60)
    assert dying.shards_held() == [shard]
    assert history(f"{other.url}/v1/stream/{name}") == list(range(20))


def test_a_single_servers_location_opens_as_one_shard(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    data_dir = tmp_path / "single"
    single = server_factory("--flush-interval-ms", "600000", data_dir=data_dir)
    assert requests.put(single.stream_url("kept"), headers=JSON, timeout=30).status_code == 201
    for n in range(10):
        answer = requests.post(single.stream_url("kept"), data=b'{"n": %d}' % n, headers=JSON, timeout=30)
        assert answer.status_code in (200, 204), answer.text
    single.kill()  # its WAL holds the appends

    node = server_factory("--cluster", "--storage-uri", str(data_dir / "delta"), "--shards", "8", data_dir=data_dir)
    answer = requests.get(f"{node.url}/v1/cluster", timeout=30)
    wait_for(
        lambda: requests.get(f"{node.url}/v1/cluster", timeout=30).json()["shards"][0]["state"] == "serving",
        timeout_s=60,
    )
    assert len(answer.json()["shards"]) == 1  # adopted as it is: one shard, the location itself
    assert history(f"{node.url}/v1/stream/kept") == list(range(10))
    assert requests.post(f"{node.url}/v1/stream/kept", data=b'{"n": 10}', headers=JSON, timeout=30).status_code in (
        200,
        204,
    )
    assert history(f"{node.url}/v1/stream/kept") == list(range(11))


def test_a_plain_reader_meets_no_dropped_connection_while_a_shard_moves(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Readers with a plain HTTP client (following redirects, asking nothing again) through
    both nodes while one drains a shard to the other: every answer is a 200 or a 503 with
    ``Retry-After``, never a refused or dropped connection (a drain is announced in the lease
    before its server stops, so no router still sends a client to it: ``cluster.node.supervisor``).
    Without the announcement, the joining node's router redirected readers to the stopping
    server until its next look at the leases."""
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "5"]  # (a tick of 1 s)
    first = start_node(server_factory, storage, "n0", tmp_path)
    wait_for(serving([first], 2), timeout_s=60)
    names = [name_in_shard(shard, 2, "read") for shard in range(2)]  # (whichever shard moves)
    for name in names:
        assert requests.put(f"{first.url}/v1/stream/{name}", headers=JSON, timeout=30).status_code == 201
        for n in range(5):
            answer = requests.post(f"{first.url}/v1/stream/{name}", data=b'{"n": %d}' % n, headers=JSON, timeout=30)
            assert answer.status_code in (200, 204), answer.text
    joined = start_node(server_factory, storage, "n1", tmp_path)
    answers: dict[str, int] = {}
    dropped: list[str] = []
    stop = threading.Event()

    def read(url: str) -> None:
        while not stop.is_set():
            try:
                answer = requests.get(url, params={"offset": "-1"}, timeout=30)
            except requests.ConnectionError as exc:
                dropped.append(f"{url}: {exc}")
                continue
            key = str(answer.status_code)
            answers[key] = answers.get(key, 0) + 1
            if answer.status_code == 200:
                assert [item["n"] for item in answer.json()] == list(range(5))
            else:
                assert answer.status_code == 503 and answer.headers["Retry-After"] == "1", answer.text

    urls = [f"{node.url}/v1/stream/{name}" for node in (first, joined) for name in names]
    readers = [threading.Thread(target=read, args=(url,), daemon=True) for url in urls]
    for reader in readers:
        reader.start()
    wait_for(
        lambda: len(joined.shards_held()) == 1 and serving([first, joined], 2)(),
        timeout_s=120,
        message=lambda: f"{first.describe()} {joined.describe()} {answers}",
    )
    time.sleep(1)  # (reads after the move, through both nodes)
    stop.set()
    for reader in readers:
        reader.join(timeout=60)
    assert not dropped, f"{len(dropped)} connections dropped or refused ({answers}): {dropped[:3]}"
    assert answers.get("200", 0) > 100, answers
