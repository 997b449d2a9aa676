"""Forks whose source lives in another shard, through a node that holds neither shard.

The fork's shard copies what the fork inherits from the source's shard (``engine.copied_forks``)
and the source's shard counts the fork as a link (``engine.fork_links``): checked here as a
client meets it: the fork reads its source's messages at the source's own offsets, then its
own; JSON and binary sub-offsets; a repeated PUT; the source's refusals; deleting the source
while the fork lives (410, re-create 409) and deleting the fork afterwards (the source goes);
an unlink that waits for the source's shard to come back; the fork's data after ``kill -9`` of
its owner (``--durability delta``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from cluster_support import JSON, Node, history, name_in_shard, send, serving, start_node
from servers import MotoServer, ServerProcess, wait_for

from durable_streams_server.cluster.paths import shard_of_key

pytestmark = pytest.mark.slow

BINARY = {"Content-Type": "application/octet-stream"}


def _nodes(factory: Callable[..., ServerProcess], storage: list[str], tmp: Path, shards: int) -> list[Node]:
    nodes = [start_node(factory, storage, f"n{index}", tmp) for index in range(3)]
    wait_for(serving(nodes, shards), message=lambda: str([node.describe() for node in nodes]), timeout_s=60)
    return nodes


def _moto_root(moto: MotoServer) -> list[str]:
    bucket = f"forks-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    return moto.server_args(f"s3://{bucket}/root")


def _holder(nodes: list[Node], shard: int) -> Node:
    return next(node for node in nodes if shard in node.shards_held())


def _view(node: Node, shard: int) -> tuple[object, object]:
    """The state and holder of ``shard`` as ``node`` sees it."""
    view = node.describe()["shards"][shard]  # type: ignore[index]
    return view["state"], view["holder"]


def _fork(front: Node, name: str, source: str, **headers: str) -> requests.Response:
    given = {"Stream-Forked-From": f"/v1/stream/{source}", **{k.replace("_", "-"): v for k, v in headers.items()}}
    return requests.put(f"{front.url}/v1/stream/{name}", headers={**JSON, **given}, timeout=60)


def _bucket_in(shard: int, shards: int) -> str:
    return next(f"bk-{i}" for i in range(10_000) if shard_of_key(f"b/bk-{i}", shards) == shard)


def _post(url: str, body: bytes, headers: dict[str, str] = JSON) -> requests.Response:
    answer = requests.post(url, data=body, headers=headers, timeout=30)
    assert answer.status_code in (200, 204), answer.text
    return answer


def _status(url: str) -> int | None:
    """A read's status; ``None`` when the shard's server it was sent to is gone (a killed node's,
    until its node's router notices)."""
    try:
        return requests.get(url, params={"offset": "-1"}, timeout=30).status_code
    except requests.ConnectionError:
        return None


def _delete(url: str) -> int:
    """A DELETE's status once its shard is not moving (``cluster_support.send``)."""
    return send("DELETE", url).status_code


def _settled_status(url: str) -> int:
    """A read's status once the stream's shard is not moving (``cluster_support.send``)."""
    return send("GET", url, params={"offset": "-1"}).status_code


def _wait_status(url: str, status: int) -> None:
    wait_for(lambda: _status(url) == status, timeout_s=60)


def test_a_fork_of_another_shards_stream_through_a_node_that_holds_neither(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    storage = [*_moto_root(moto), "--shards", "3", "--lease-ttl-s", "3"]
    nodes = _nodes(server_factory, storage, tmp_path, 3)
    front = nodes[0]
    own = front.shards_held()[0]
    source_shard, fork_shard = [shard for shard in range(3) if shard != own]
    source, fork = name_in_shard(source_shard, 3, "src"), name_in_shard(fork_shard, 3, "fork")
    source_url, fork_url = f"{front.url}/v1/stream/{source}", f"{front.url}/v1/stream/{fork}"

    created = requests.put(source_url, headers=JSON, timeout=30)
    assert created.status_code == 201, created.text
    start = created.headers["Stream-Next-Offset"]
    middle = _post(source_url, b'[{"n": 0}, {"n": 1}, {"n": 2}]').headers["Stream-Next-Offset"]
    _post(source_url, b'[{"n": 3}, {"n": 4}]')

    # at the source's head: every message, at the source's own offsets, then the fork's own
    forked = _fork(front, fork, source)
    assert forked.status_code == 201, forked.text
    head = requests.head(source_url, allow_redirects=True, timeout=30)
    assert forked.headers["Stream-Next-Offset"] == head.headers["Stream-Next-Offset"]
    _post(fork_url, b'{"n": 5}')
    assert history(fork_url) == [0, 1, 2, 3, 4, 5]
    assert history(source_url) == [0, 1, 2, 3, 4]
    from_middle = requests.get(fork_url, params={"offset": middle}, timeout=30)
    assert [item["n"] for item in from_middle.json()] == [3, 4, 5]

    # a repeated PUT: the same configuration 200, another 409
    assert _fork(front, fork, source).status_code == 200
    assert _fork(front, fork, source, Stream_Fork_Offset=start).status_code == 409

    # a JSON sub-offset keeps that many values of the batch at the fork offset
    sub = name_in_shard(fork_shard, 3, "jsonsub")
    answer = _fork(front, sub, source, Stream_Fork_Offset=start, Stream_Fork_Sub_Offset="2")
    assert answer.status_code == 201, answer.text
    assert history(f"{front.url}/v1/stream/{sub}") == [0, 1]
    same = _fork(front, sub, source, Stream_Fork_Offset=start, Stream_Fork_Sub_Offset="2")
    assert same.status_code == 200
    other = _fork(front, sub, source, Stream_Fork_Offset=start, Stream_Fork_Sub_Offset="1")
    assert other.status_code == 409

    # a binary sub-offset keeps that many bytes of the message at the fork offset
    blob = name_in_shard(source_shard, 3, "blob")
    blob_url = f"{front.url}/v1/stream/{blob}"
    blob_start = requests.put(blob_url, headers=BINARY, timeout=30).headers["Stream-Next-Offset"]
    _post(blob_url, b"hello world", BINARY)
    cut = name_in_shard(fork_shard, 3, "cut")
    answer = requests.put(
        f"{front.url}/v1/stream/{cut}",
        headers={
            **BINARY,
            "Stream-Forked-From": f"/v1/stream/{blob}",
            "Stream-Fork-Offset": blob_start,
            "Stream-Fork-Sub-Offset": "5",
        },
        timeout=60,
    )
    assert answer.status_code == 201, answer.text
    read = requests.get(f"{front.url}/v1/stream/{cut}", params={"offset": blob_start}, timeout=30)
    assert read.content == b"hello"

    # the bucketed surface too: a bucket's stream forked into a bucket of another shard
    source_bucket, fork_bucket = _bucket_in(source_shard, 3), _bucket_in(fork_shard, 3)
    for bucket in (source_bucket, fork_bucket):
        assert requests.put(f"{front.url}/{bucket}", timeout=30).status_code == 201
    assert requests.put(f"{front.url}/{source_bucket}/s", headers=JSON, timeout=30).status_code == 201
    _post(f"{front.url}/{source_bucket}/s", b'[{"n": 7}, {"n": 8}]')
    bucketed = requests.put(
        f"{front.url}/{fork_bucket}/f", headers={**JSON, "Stream-Forked-From": f"/{source_bucket}/s"}, timeout=60
    )
    assert bucketed.status_code == 201, bucketed.text
    assert history(f"{front.url}/{fork_bucket}/f") == [7, 8]

    # the source's refusals, as a local fork gets them
    missing = _fork(front, name_in_shard(fork_shard, 3, "m"), name_in_shard(source_shard, 3, "absent"))
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "STREAM_NOT_FOUND")
    beyond = _fork(front, name_in_shard(fork_shard, 3, "b"), source, Stream_Fork_Offset="9" * 16 + "_" + "0" * 16)
    assert beyond.status_code == 400, beyond.text
    mismatch = requests.put(
        f"{front.url}/v1/stream/{name_in_shard(fork_shard, 3, 'ct')}",
        headers={**BINARY, "Stream-Forked-From": f"/v1/stream/{source}"},
        timeout=60,
    )
    assert (mismatch.status_code, mismatch.json()["error"]["code"]) == (409, "CONTENT_TYPE_MISMATCH")

    # the internal route is the cluster's own: without its credential nothing is exported or unlinked
    internal = f"{front.url}/v1/cluster/fork-links/v1/stream/{source}"
    link = {"Durable-Streams-Fork-Link": "mine", "Durable-Streams-Fork": f"v1/stream/{fork}-x"}
    for secret in ({}, {"Durable-Streams-Cluster-Secret": "guessed"}):
        refused = requests.post(internal, headers={**link, **secret}, timeout=30)
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "FORBIDDEN"), refused.text
        refused = requests.delete(internal, params={"link": "mine"}, headers=secret, timeout=30)
        assert refused.status_code == 403, refused.text

    # deleting the source while forks live: 410 to readers, a re-create 409, forks read on
    assert requests.delete(source_url, timeout=30).status_code == 204
    assert requests.get(source_url, params={"offset": "-1"}, timeout=30).status_code == 410
    assert requests.put(source_url, headers=JSON, timeout=30).status_code == 409
    deleted = _fork(front, name_in_shard(fork_shard, 3, "late"), source)
    assert (deleted.status_code, deleted.json()["error"]["code"]) == (409, "STREAM_DELETED")
    assert history(fork_url) == [0, 1, 2, 3, 4, 5]

    # its last fork removed, the source goes: its path is free again
    assert requests.delete(fork_url, timeout=30).status_code == 204
    assert requests.get(source_url, params={"offset": "-1"}, timeout=30).status_code == 410  # (the JSON sub-fork)
    assert requests.delete(f"{front.url}/v1/stream/{sub}", timeout=30).status_code == 204
    _wait_status(source_url, 404)
    assert requests.put(source_url, headers=JSON, timeout=30).status_code == 201
    assert history(source_url) == []


def test_an_unlink_waits_for_the_sources_shard(server_factory: Callable[..., ServerProcess], tmp_path: Path) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "3", "--lease-ttl-s", "3"]
    storage += ["--durability", "wal"]  # (a dead WAL node's shards wait for it: the source's stays unreachable)
    storage += ["--cross-shard-fork-max-bytes", "1000"]
    nodes = _nodes(server_factory, storage, tmp_path, 3)
    front = nodes[0]
    source_shard, fork_shard = [shard for shard in range(3) if shard not in front.shards_held()]
    source_node, fork_node = _holder(nodes, source_shard), _holder(nodes, fork_shard)
    source, fork = name_in_shard(source_shard, 3, "src"), name_in_shard(fork_shard, 3, "fork")
    source_url, fork_url = f"{front.url}/v1/stream/{source}", f"{front.url}/v1/stream/{fork}"
    assert requests.put(source_url, headers=JSON, timeout=30).status_code == 201
    _post(source_url, b'[{"n": 0}, {"n": 1}]')

    # a copy past --cross-shard-fork-max-bytes is refused, and the link its export made is removed again
    large = name_in_shard(source_shard, 3, "large")
    assert requests.put(f"{front.url}/v1/stream/{large}", headers=JSON, timeout=30).status_code == 201
    _post(f"{front.url}/v1/stream/{large}", b'[{"n": 0, "pad": "%s"}]' % (b"x" * 1200))
    refused = _fork(front, name_in_shard(fork_shard, 3, "large"), large)
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "FORK_TOO_LARGE"), refused.text
    assert requests.delete(f"{front.url}/v1/stream/{large}", timeout=30).status_code == 204
    _wait_status(f"{front.url}/v1/stream/{large}", 404)  # (not soft-deleted: no fork holds it)

    assert _fork(front, fork, source).status_code == 201
    assert requests.delete(source_url, timeout=30).status_code == 204
    assert requests.get(source_url, params={"offset": "-1"}, timeout=30).status_code == 410

    source_node.kill()
    _wait_status(source_url, 503)
    assert _delete(fork_url) == 204  # (its unlink is kept, pending)
    assert _settled_status(fork_url) == 404
    assert _status(source_url) == 503
    fork_node.kill()  # the pending unlink is in its WAL only: the restarted shard server sends it

    source_node.process.start()
    fork_node.process.start()
    wait_for(serving(nodes, 3), timeout_s=60)
    _wait_status(source_url, 404)  # the unlink arrived: the soft-deleted source went with its last fork
    assert requests.put(source_url, headers=JSON, timeout=30).status_code == 201


def test_a_forks_copy_survives_kill_9_of_its_owner(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    storage = [*_moto_root(moto), "--shards", "3", "--lease-ttl-s", "3", "--durability", "delta"]
    nodes = _nodes(server_factory, storage, tmp_path, 3)
    front = nodes[0]
    source_shard, fork_shard = [shard for shard in range(3) if shard not in front.shards_held()]
    victim = _holder(nodes, fork_shard)
    source, fork = name_in_shard(source_shard, 3, "src"), name_in_shard(fork_shard, 3, "fork")
    source_url, fork_url = f"{front.url}/v1/stream/{source}", f"{front.url}/v1/stream/{fork}"
    assert requests.put(source_url, headers=JSON, timeout=30).status_code == 201
    for n in range(10):
        _post(source_url, b'{"n": %d}' % n)
    assert _fork(front, fork, source).status_code == 201
    _post(fork_url, b'{"n": 10}')

    victim.kill()
    survivors = [node for node in nodes if node is not victim]
    # The survivors' steady state (a shard may move once more while they balance), and the front
    # node sending the fork's shard to its holder: until it has read the new lease it still sends
    # requests to the dead node's server, as any router would until the lease's expiry is seen.
    wait_for(serving(survivors, 3), timeout_s=60)

    def front_sends_to_the_holder() -> bool:
        holders = [node.node_id for node in survivors if fork_shard in node.shards_held()]
        return len(holders) == 1 and _view(front, fork_shard) == ("serving", holders[0])

    wait_for(front_sends_to_the_holder, timeout_s=60)
    assert history(fork_url) == list(range(11))
    assert requests.delete(source_url, timeout=30).status_code == 204
    assert requests.get(source_url, params={"offset": "-1"}, timeout=30).status_code == 410  # the link survived too
