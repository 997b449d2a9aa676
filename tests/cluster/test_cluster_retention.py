"""Retention through a cluster node (one node, one shard, a local storage root): a create's limits
and a PATCH reach the shard's server relayed and redirected alike, its maintenance moves the point,
and a read below it answers 410 with the earliest offset through the node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cluster_support import serving, start_node
from servers import ServerProcess, session, wait_for

TEXT = {"Content-Type": "text/plain"}
FOLLOW = {"durable-streams-redirects": "follow"}


def _offset(seq: int) -> str:
    return f"{seq:016d}_0000000000000000"


def test_limits_reach_the_shard_server_relayed_and_redirected(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "1", "--lease-ttl-s", "3"]
    node = start_node(server_factory, storage, "n0", tmp_path, "--compaction-interval-s", "0.3")
    wait_for(serving([node], 1), message=lambda: str(node.describe()), timeout_s=60)
    http = session()
    url = f"{node.url}/v1/stream/kept"
    created = http.put(url, headers={**TEXT, "Stream-Retention-Max-Messages": "4"}, timeout=30)
    assert created.status_code == 201, created.text
    for n in range(10):
        assert http.post(url, data=f"m{n};", headers=TEXT, timeout=30).status_code == 204

    def earliest() -> str:
        return str(http.head(url, allow_redirects=True, timeout=30).headers["Stream-Earliest-Offset"])

    wait_for(lambda: earliest() == _offset(6), message=earliest, timeout_s=60)
    gone = http.get(url, params={"offset": "-1"}, timeout=30)
    assert gone.status_code == 410 and gone.headers["Stream-Earliest-Offset"] == _offset(6)
    assert http.get(url, params={"offset": _offset(6)}, timeout=30).text == "m6;m7;m8;m9;"

    for extra, limit in (({}, "2"), (FOLLOW, "3")):  # relayed, then redirected (307, followed by requests)
        changed = http.patch(url, headers={**extra, "Stream-Retention-Max-Messages": limit}, timeout=30)
        assert changed.status_code == 204, changed.text
        assert http.head(url, allow_redirects=True, timeout=30).headers["Stream-Retention-Max-Messages"] == limit
    refused = http.patch(url, headers={"Stream-Retention-Max-Messages": "0"}, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_RETENTION"
    for n in range(10, 13):
        assert http.post(url, data=f"m{n};", headers=TEXT, timeout=30).status_code == 204
    wait_for(lambda: earliest() == _offset(10), message=earliest, timeout_s=60)  # (the limit of 3 set through the node)
    assert http.get(url, params={"offset": _offset(10)}, timeout=30).text == "m10;m11;m12;"
