"""The public conformance suite through a cluster node that serves none of the suite's streams.

Two nodes over one storage root on moto's S3, one shard: the first node holds it, the second
holds nothing, so every request the suite sends to the second node is answered by a 307 to
the first node's shard server, and the suite's own client (fetch) follows it with the same
method and body. The whole suite, subscriptions included, must pass as it does against a
single server.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from cluster_support import serving, start_node, until
from runner import run_conformance
from servers import MotoServer, ServerProcess
from test_conformance import LONG_POLL, SUITE_TESTS

pytestmark = pytest.mark.slow


def test_conformance_through_a_node_that_owns_nothing(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    bucket = f"conformance-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    storage = [*moto.server_args(f"s3://{bucket}/root"), "--shards", "1", *LONG_POLL]
    owner = start_node(server_factory, storage, "owner", tmp_path)
    until(serving([owner], 1))
    front = start_node(server_factory, storage, "front", tmp_path)
    until(lambda: "front" in owner.describe()["live_nodes"])  # type: ignore[operator]
    assert front.shards_held() == [] and owner.shards_held() == [0]

    result = run_conformance(front.url, include_subscriptions=True)

    failures = "\n".join(f"  {failure.full_name}: {failure.error}" for failure in result.failures)
    assert (result.passed, result.failed, result.skipped) == (SUITE_TESTS, 0, 0), f"{result.summary}\n{failures}"
    assert front.shards_held() == [] and owner.shards_held() == [0]  # nothing moved meanwhile
