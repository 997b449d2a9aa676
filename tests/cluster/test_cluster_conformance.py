"""The public conformance suite through cluster nodes, whole (subscriptions included).

Three nodes over one storage root on moto's S3, one shard: the first node holds it, the
others hold nothing, so every request the suite sends to the second node is redirected (307)
to the first node's shard server or relayed to it (``cluster.node.proxy``: bodies from ``fetch``,
the ``__ds`` namespace). Then three shards over three nodes: the suite's streams (one first
path segment each) spread over every shard, so its forks are mostly of another shard's
stream (copies: ``cluster.shard.fork_copies``) and its base-surface subscriptions match streams of
every shard (tail reports: ``cluster.shard.remote_streams``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from cluster_support import serving, start_node
from runner import run_conformance
from servers import MotoServer, ServerProcess, wait_for
from test_conformance import LONG_POLL, SUITE_TESTS

from durable_streams_server.cluster.node.proxy import FOLLOWS_HEADER

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # (alone: tests/test_conformance.py)


def test_conformance_through_a_node_that_owns_nothing(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    bucket = f"conformance-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    storage = [*moto.server_args(f"s3://{bucket}/root"), "--shards", "1", *LONG_POLL]
    owner = start_node(server_factory, storage, "owner", tmp_path)
    wait_for(serving([owner], 1), timeout_s=60)
    front = start_node(server_factory, storage, "front", tmp_path)
    third = start_node(server_factory, storage, "third", tmp_path)
    wait_for(lambda: owner.describe()["live_nodes"] == ["front", "owner", "third"], timeout_s=60)
    assert front.shards_held() == [] and third.shards_held() == [] and owner.shards_held() == [0]

    result = run_conformance(front.url, include_subscriptions=True)

    failures = "\n".join(f"  {failure.full_name}: {failure.error}" for failure in result.failures)
    assert (result.passed, result.failed, result.skipped) == (SUITE_TESTS, 0, 0), f"{result.summary}\n{failures}"
    assert front.shards_held() == [] and owner.shards_held() == [0]  # nothing moved meanwhile


def test_conformance_relayed_whole_through_a_node_that_owns_nothing(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Every request of the suite asks ``Durable-Streams-Redirects: relay`` (a client that must
    stay on the node it asked) and refuses redirects (``fetch_setup.mjs``): reads, long-polls and
    SSE as well as writes pass through the node's relay to the other node's shard server. The
    node's access log shows it answered every request itself, none with a 307."""
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "1", *LONG_POLL]
    owner = start_node(server_factory, storage, "owner", tmp_path)
    wait_for(serving([owner], 1), timeout_s=60)
    front = start_node(server_factory, storage, "front", tmp_path, "--access-log")
    wait_for(lambda: owner.describe()["live_nodes"] == ["front", "owner"], timeout_s=60)
    assert front.shards_held() == [] and owner.shards_held() == [0]
    logged = front.process.log_path.stat().st_size

    result = run_conformance(front.url, include_subscriptions=True, fetch_headers={FOLLOWS_HEADER: "relay"})

    failures = "\n".join(f"  {failure.full_name}: {failure.error}" for failure in result.failures)
    assert (result.passed, result.failed, result.skipped) == (SUITE_TESTS, 0, 0), f"{result.summary}\n{failures}"
    assert front.shards_held() == [] and owner.shards_held() == [0]  # nothing moved meanwhile
    with open(front.process.log_path, "rb") as log:
        log.seek(logged)
        statuses = re.findall(rb'/v1/stream/\S* HTTP/1\.1\\?" (\d{3})', log.read())
    assert len(statuses) > SUITE_TESTS and b"307" not in statuses, sorted(set(statuses))


def test_conformance_at_three_shards_through_one_node(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    """The suite's streams spread over three shards held by three nodes: through one node, about two
    of three requests go to another node's shard server; forks whose source lives in another shard are
    copies, and base-surface subscriptions learn the other shards' streams from tail reports."""
    bucket = f"conformance-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    storage = [*moto.server_args(f"s3://{bucket}/root"), "--shards", "3", *LONG_POLL]
    nodes = [start_node(server_factory, storage, name, tmp_path) for name in ("front", "second", "third")]
    wait_for(serving(nodes, 3), timeout_s=60)
    held = [node.shards_held() for node in nodes]
    assert sorted(shard for shards in held for shard in shards) == [0, 1, 2] and all(len(s) == 1 for s in held)

    result = run_conformance(nodes[0].url, include_subscriptions=True)

    failures = "\n".join(f"  {failure.full_name}: {failure.error}" for failure in result.failures)
    assert (result.passed, result.failed, result.skipped) == (SUITE_TESTS, 0, 0), f"{result.summary}\n{failures}"
    assert [node.shards_held() for node in nodes] == held  # nothing moved meanwhile
