"""Fixtures of the fault scenarios: a private network of namespaces (``netns``) with moto's S3
server in it, and clusters of three nodes, in those namespaces or on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cluster_support import Node, start_node
from netns import Network, missing_capability, namespace_pids, private_network
from scenario import NODE_OPTIONS, FaultCluster
from servers import MotoServer, ServerProcess, wait_for

NODES = 3
SHARDS = 3
NODE_PORT = 7000
STORE_PORT = 9000


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    """The private network (``netns``) for three nodes; skipped where it cannot be built."""
    missing = missing_capability()
    if missing is not None:
        pytest.skip(f"the partition scenarios need network namespaces, veth pairs and bridges: {missing}")
    with private_network(NODES) as built:
        yield built


@pytest.fixture(scope="module")
def netns_moto(network: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """moto's S3 server in the store namespace, reached by the nodes over their storage links."""
    prefix = network.exec_prefix(network.store)
    server = MotoServer(port=STORE_PORT, host=network.store_address, command_prefix=prefix)
    server.start(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


def _storage(moto: MotoServer, durability: str) -> list[str]:
    bucket = f"faults-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    return [*moto.server_args(f"s3://{bucket}/root"), "--shards", str(SHARDS), "--durability", durability]


def _wait_served(cluster: FaultCluster) -> FaultCluster:
    """Every shard served, and every node holding one (no rebalancing move still to come)."""
    wait_for(
        lambda: cluster.served() and all(node.shards_held() for node in cluster.nodes),
        timeout_s=120,
        message=lambda: f"{cluster.views()}\n" + "\n".join(_log_tail(node) for node in cluster.nodes),
    )
    return cluster


def _log_tail(node: Node) -> str:
    """The end of a node's log (its shard servers write theirs into it too)."""
    lines = [line for line in node.process.log_text().splitlines() if "HTTP/1.1" not in line]
    return f"--- {node.node_id}:\n" + "\n".join(lines[-25:])


@pytest.fixture
def netns_cluster(network: Network, netns_moto: MotoServer, tmp_path: Path) -> Iterator[Callable[[str], FaultCluster]]:
    """Start a cluster of three nodes, each in its namespace (``--host`` its front address,
    which its shard servers bind and advertise too), with this durability; all killed, every
    link healed and every process left in a node's namespace killed at teardown."""
    nodes: list[Node] = []

    def start(durability: str) -> FaultCluster:
        storage = [*_storage(netns_moto, durability), *NODE_OPTIONS, "--allow-unauthenticated"]
        for index, namespace in enumerate(network.nodes):
            process = ServerProcess(
                tmp_path / f"n{index}",
                ["--cluster", "--node-id", f"n{index}", *storage],
                port=NODE_PORT,
                host=network.front_address(index),
                command_prefix=network.exec_prefix(namespace),
            )
            nodes.append(Node(process.start(), f"n{index}"))
        return _wait_served(FaultCluster(nodes, SHARDS, durability))

    yield start
    for node in nodes:
        node.resume()
        node.process.kill()
    network.heal_all()
    for namespace in network.nodes:
        for pid in namespace_pids(namespace):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def loopback_cluster(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> Iterator[Callable[[str], FaultCluster]]:
    """Start a cluster of three nodes on loopback over moto (``server_factory`` kills them; a node
    a failed scenario left paused is continued first, or its spare stays stopped for the rest of
    the run, its pipe unread)."""
    nodes: list[Node] = []

    def start(durability: str) -> FaultCluster:
        storage = [*_storage(moto, durability), *NODE_OPTIONS]
        nodes.extend(start_node(server_factory, storage, f"n{index}", tmp_path) for index in range(NODES))
        return _wait_served(FaultCluster(nodes[-NODES:], SHARDS, durability))

    yield start
    for node in nodes:
        node.resume()
