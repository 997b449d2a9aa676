"""Conditional appends through a cluster node (one node, one shard, a local storage root): the
node relays a plain client's append and redirects one that follows redirects itself
(``cluster/node/proxy.py``); either way the shard's server gets the ``If-Match`` and answers its
``ETag`` or ``412`` back unchanged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import requests
from cluster_support import serving, start_node
from conditional_race import check_race, run_race
from servers import ServerProcess, session, wait_for

TEXT = {"Content-Type": "text/plain"}
FOLLOW = {"durable-streams-redirects": "follow"}


def _offset(seq: int) -> str:
    return f"{seq:016d}_0000000000000000"


def test_if_match_reaches_the_shard_server_relayed_and_redirected(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "1", "--lease-ttl-s", "3"]
    node = start_node(server_factory, storage, "n0", tmp_path)
    wait_for(serving([node], 1), message=lambda: str(node.describe()), timeout_s=60)
    http = session()
    url = f"{node.url}/v1/stream/conditional"
    assert http.put(url, headers=TEXT, timeout=30).status_code == 201
    for n, extra in enumerate([{}, FOLLOW]):  # relayed, then redirected (307, followed by requests)
        if extra:
            moved = http.post(url, data="x", headers={**TEXT, **extra, "If-Match": '"bad"'}, allow_redirects=False)
            assert moved.status_code == 307  # (a redirect, not an answer: the shard's server decides)
        stored = http.post(url, data=f"{n}", headers={**TEXT, **extra, "If-Match": f'"{_offset(n)}"'}, timeout=30)
        assert stored.status_code == 204, stored.text
        assert stored.headers["ETag"] == f'"{_offset(n + 1)}"'
        refused = http.post(url, data="lost", headers={**TEXT, **extra, "If-Match": f'"{_offset(n)}"'}, timeout=30)
        assert refused.status_code == 412, refused.text
        assert refused.headers["ETag"] == f'"{_offset(n + 1)}"'
        assert refused.headers["Stream-Next-Offset"] == _offset(n + 1)
        star = http.post(url, data="lost", headers={**TEXT, **extra, "If-Match": "*"}, timeout=30)
        assert star.status_code == 400, star.text
    assert requests.get(url, params={"offset": "-1"}, timeout=30).content == b"01"


def test_race_32_writers_through_a_node_one_winner_per_offset(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """The single server's race (``conditional_race``), every request through a node that holds no
    shard: appends relayed, HEADs redirected, the history read back through the node too."""
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "1", "--lease-ttl-s", "3"]
    owner = start_node(server_factory, storage, "n0", tmp_path)
    wait_for(serving([owner], 1), message=lambda: str(owner.describe()), timeout_s=60)
    router = start_node(server_factory, storage, "n1", tmp_path)
    wait_for(
        lambda: router.describe()["held"] == [] and serving([owner], 1)(),
        message=lambda: str(router.describe()),
        timeout_s=60,
    )
    http = session()
    url = f"{router.url}/v1/stream/raced"
    assert http.put(url, headers={"Content-Type": "application/json"}, timeout=30).status_code == 201
    summary = check_race(http, url, run_race(url))
    print(f"\nrace through a node: {summary}")
