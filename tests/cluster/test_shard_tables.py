"""A shard's table missing from its location when a node that never served the shard takes it
(``cluster/node/shard_tables.py``): real node processes over one local storage root.

Two nodes, two shards, ``--durability delta``. The node holding shard 0 is killed (``kill -9``)
and the shard's table moved aside (a prefix deleted or renamed, a volume that did not mount):
the other node, which never served shard 0, takes its lease. Before the cluster recorded each
shard's table, that node's server made a new table there and answered every stream of the
shard 404, handing their offsets out again. Now its starts are refused, the lease let go, the
shard unavailable (503) and no table made, ``GET /v1/cluster`` saying why beside the shard (its
server's last failed start); once the table is back, the whole history is served.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from cluster_support import JSON, history, name_in_shard, send, serving, start_node
from servers import ServerProcess, wait_for

from durable_streams_server.cluster.node.objects import open_objects
from durable_streams_server.cluster.node.shards import table_key
from durable_streams_server.storage import start_refusal

pytestmark = pytest.mark.slow

MESSAGES = 20


def test_a_node_that_never_served_a_shard_refuses_it_while_its_table_is_missing(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = tmp_path / "root"
    storage = ["--storage-uri", str(root), "--shards", "2", "--durability", "delta", "--lease-ttl-s", "2"]
    nodes = [start_node(server_factory, storage, f"n{index}", tmp_path) for index in range(2)]
    wait_for(serving(nodes, 2), timeout_s=60, message=lambda: str([node.describe() for node in nodes]))
    holder = next(node for node in nodes if 0 in node.shards_held())
    other = nodes[1] if holder is nodes[0] else nodes[0]
    url = f"{other.url}/v1/stream/{name_in_shard(0, 2, 'gone')}"
    assert send("PUT", url, headers=JSON).status_code == 201
    for n in range(MESSAGES):
        assert send("POST", url, data=b'{"n": %d}' % n, headers=JSON).status_code == 204
    objects = open_objects(str(root), {})
    wait_for(lambda: objects.get(table_key(0)) is not None, timeout_s=30)  # (recorded once it served)
    record = objects.get(table_key(0))
    table = root / "shard-0000"
    assert record is not None and json.loads(record.body)["uri"] == f"{table}/streams"
    objects.close()

    holder.kill()
    aside = tmp_path / "shard-0000-aside"
    table.rename(aside)
    statuses: list[int] = []
    released = 'msg="shard server failed to start: lease released" shard=0'
    deadline = time.monotonic() + 120
    while released not in other.process.log_text():
        assert time.monotonic() < deadline, other.process.log_text()[-4000:]
        statuses.append(_status(url))
        assert statuses[-1] in (0, 503), f"a read answered {statuses[-1]} while the shard's table was missing"
        time.sleep(0.5)
    statuses += [_status(url) for _ in range(5)]
    assert set(statuses) <= {0, 503} and 503 in statuses, statuses  # (never 404: no stream read as never made)
    log = other.process.log_text()
    assert f"the table {root}/_cluster/tables/0000.json names at {table}/streams" in log, log[-4000:]
    assert log.count("shard server failed to start; starting it again") >= 2
    assert not (table / "streams" / "_delta_log").exists(), "a table was made where the shard's table was missing"
    failed = other.describe()["shards"][0]["failed_start"]  # type: ignore[index]
    assert failed is not None and failed["exit_code"] == 3 and "refused" in failed["meaning"], failed
    assert f"names at {table}/streams" in failed["reason"] and "is not there" in failed["reason"], failed
    refusal = other.process.data_dir / "shards" / "0000" / start_refusal.FILE  # (where its server left it)
    assert refusal.exists()

    aside.rename(table)
    assert history(url, moving_s=90) == list(range(MESSAGES))
    assert send("POST", url, data=b'{"n": 20}', headers=JSON).status_code == 204
    assert history(url) == list(range(MESSAGES + 1))
    assert other.describe()["shards"][0]["failed_start"] is None  # type: ignore[index]  # (served: cleared)
    assert not refusal.exists()  # (the start that served it let it go)


def _status(url: str) -> int:
    """A read's status through the node (redirects followed); 0 for a redirect to the killed
    node's server, which the router names until its lease expires."""
    try:
        return requests.get(url, params={"offset": "-1"}, timeout=10).status_code
    except requests.ConnectionError:
        return 0
