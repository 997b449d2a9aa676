"""Process faults of one cluster node on loopback: killed, or stopped (SIGSTOP) and continued.

Three nodes, three shards, ``--durability delta`` over moto's S3 server, lease ttl 2 s; the
workload (``workload``) runs through every node before, during and after the fault; a fault
lasts five lease ttls, then it is healed and the checker (``checker``) reads every stream's
history and every read back. Every scenario asserts 0 lost, 0 duplicated, 0 forked reads.

=============================  =======================================================
scenario                       the fault on node n1 (5 ttls), then healed
=============================  =======================================================
kill_9_node                    ``kill -9`` of the node (its shard servers die with it);
                               the others take its shard; healed: started again
stop_node                      SIGSTOP of the node alone: its shard server runs on, its
                               leases expire and the others take its shard (asking the
                               running server to hand over); healed: SIGCONT
stop_shard_server              SIGSTOP of one shard server alone: its node renews the
                               lease, and kills the server that stopped answering after
                               a lease ttl, then starts another; healed: SIGCONT (of
                               the server, if it is still there)
stop_node_and_shard_servers    SIGSTOP of the node and its shard servers (a VM that
                               froze): the others take its shard; SIGCONT, and the old
                               servers are killed as their leases ended
=============================  =======================================================
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

import pytest
from cluster_support import Node, children, shard_servers
from scenario import FaultCluster, assert_clean, run_scenario

pytestmark = pytest.mark.slow

VICTIM = 1


def _pid(node: Node) -> int:
    assert node.process.proc is not None
    return node.process.proc.pid


def _signal(pids: list[int], sent: signal.Signals) -> None:
    """``sent`` to each of ``pids`` that is still there (a stopped server may have been killed)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sent)


def _kill(node: Node) -> None:
    node.kill()


def _start(node: Node) -> None:
    node.process.start()


def test_kill_9_of_a_node(loopback_cluster: Callable[[str], FaultCluster]) -> None:
    cluster = loopback_cluster("delta")
    victim = cluster.nodes[VICTIM]
    row = run_scenario("kill_9_node", cluster, lambda: _kill(victim), lambda: _start(victim))
    assert_clean(row)


def test_sigstop_of_a_node_without_its_shard_servers(loopback_cluster: Callable[[str], FaultCluster]) -> None:
    cluster = loopback_cluster("delta")
    node = [_pid(cluster.nodes[VICTIM])]
    assert children(node[0]), "the node runs no shard server"
    row = run_scenario(
        "stop_node", cluster, lambda: _signal(node, signal.SIGSTOP), lambda: _signal(node, signal.SIGCONT)
    )
    assert_clean(row)


def test_sigstop_of_a_shard_server_without_its_node(loopback_cluster: Callable[[str], FaultCluster]) -> None:
    cluster = loopback_cluster("delta")
    servers = shard_servers(_pid(cluster.nodes[VICTIM]))[:1]
    assert servers, "the node runs no shard server"
    row = run_scenario(
        "stop_shard_server",
        cluster,
        lambda: _signal(servers, signal.SIGSTOP),
        lambda: _signal(servers, signal.SIGCONT),
    )
    assert_clean(row)


def test_sigstop_of_a_node_and_its_shard_servers(loopback_cluster: Callable[[str], FaultCluster]) -> None:
    cluster = loopback_cluster("delta")
    victim = cluster.nodes[VICTIM]
    row = run_scenario("stop_node_and_shard_servers", cluster, victim.pause, victim.resume)
    assert_clean(row)
