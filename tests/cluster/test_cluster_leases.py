"""Lease objects a node meets besides its peers' live leases.

A lease object that is not a lease: the node never takes that shard (its holder is unknown),
keeps serving every other shard, and takes the shard once an operator removes the object.
A free lease whose location still names an owner that never let go (a server stopped before
its takeover or its release finished): the node that takes the lease takes the location over
too, and serves what was acknowledged there."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import requests
from cluster_support import JSON, history, name_in_shard, start_node
from servers import ServerProcess, wait_for

from durable_streams_server.cluster.node.leases import LeaseRecord
from durable_streams_server.cluster.node.objects import open_objects
from durable_streams_server.cluster.node.shards import lease_key, node_key

pytestmark = pytest.mark.slow


def test_an_unreadable_lease_is_left_alone_while_the_node_goes_on(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = tmp_path / "root"
    objects = open_objects(str(root), {})
    garbage = objects.create(lease_key(1), b"{not a lease")
    assert garbage is not None
    storage = ["--storage-uri", str(root), "--shards", "2", "--lease-ttl-s", "2"]
    node = start_node(server_factory, storage, "n0", tmp_path)

    def beat() -> int:
        found = objects.get(node_key("n0"))
        return int(json.loads(found.body)["beat"]) if found is not None else -1

    wait_for(lambda: node.describe()["shards"][0]["state"] == "serving", timeout_s=120)  # type: ignore[index]
    ticks_then = beat()
    wait_for(lambda: beat() >= ticks_then + 5, timeout_s=60)  # five more ticks: the loop goes on
    view = node.describe()
    assert view["held"] == [0]
    assert view["shards"][1]["state"] == "unavailable"  # type: ignore[index]
    found = objects.get(lease_key(1))
    assert found is not None and (found.etag, found.body) == (garbage, b"{not a lease")  # untouched
    refused = requests.get(f"{node.url}/v1/stream/{name_in_shard(1, 2, 'bad')}", timeout=30)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "SHARD_UNAVAILABLE"

    (root / lease_key(1)).unlink()  # the operator removes it
    wait_for(lambda: node.describe()["held"] == [0, 1], timeout_s=120)
    url = f"{node.url}/v1/stream/{name_in_shard(1, 2, 'good')}"
    wait_for(lambda: requests.put(url, headers=JSON, timeout=30).status_code == 201, timeout_s=60)
    assert requests.post(url, data=b'{"n": 0}', headers=JSON, timeout=30).status_code in (200, 204)
    assert history(url) == [0]
    objects.close()


def test_a_free_lease_whose_location_names_a_dead_owner_is_taken_over(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = tmp_path / "root"
    storage = ["--storage-uri", str(root), "--shards", "1", "--lease-ttl-s", "2", "--durability", "delta"]
    first = start_node(server_factory, storage, "n0", tmp_path)
    wait_for(lambda: first.describe()["shards"][0]["state"] == "serving", timeout_s=120)  # type: ignore[index]
    url = f"{first.url}/v1/stream/kept"
    assert requests.put(url, headers=JSON, timeout=30).status_code == 201
    for n in range(3):
        assert requests.post(url, data=b'{"n": %d}' % n, headers=JSON, timeout=30).status_code in (200, 204)
    first.kill()  # the location still names n0's server, which never let go

    # The lease as a node leaves it when it gave the shard up before its server let the
    # location go (a drain's timeout; a starting server stopped during its takeover).
    objects = open_objects(str(root), {})
    found = objects.get(lease_key(0))
    assert found is not None
    held = LeaseRecord.from_bytes(found.body)
    assert held.holder == "n0"
    released = replace(held.next_beat(), holder=None, node_url=None, url=None, state="released")
    assert objects.replace(lease_key(0), released.to_bytes(), found.etag) is not None

    second = start_node(server_factory, storage, "n1", tmp_path)
    wait_for(lambda: second.describe()["shards"][0]["state"] == "serving", timeout_s=120)  # type: ignore[index]
    assert second.shards_held() == [0]
    assert history(f"{second.url}/v1/stream/kept") == [0, 1, 2]
    objects.close()
