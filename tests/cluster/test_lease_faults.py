"""Cluster paths that lost data or availability (issue 41), each on real node processes.

- Two processes with one node id: the second refuses to start, naming the id and the first's URL.
- ``--take-over force`` adopts the WAL leases that were expired when the node started, not
  one that expires later.
- A lease renewal that landed but whose answer was lost keeps the lease (its shard server
  lives); a store slow enough that renewing 4 leases in a row outgrows their validity fences
  no shard (renewals run concurrently). Both through ``StoreProxy``, in front of moto.
- A hung shard server (SIGSTOP, the node running on) is killed after a lease ttl of
  unanswered probes and started again: the shard is served again, every acknowledged append there.
- A lease version is first seen when its read answers, not when the sweep of reads began.
- A WAL shard server whose drain did not end cleanly (stopped, then killed with its SIGTERM
  pending) keeps its lease: its node serves it again, then hands it over properly.
- A shutdown slower than the lease ttl keeps renewing its leases until it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import requests
from cluster_support import (
    JSON,
    Node,
    ProducerAppender,
    check_history,
    history,
    name_in_shard,
    serving,
    shard_servers,
    start_node,
)
from servers import MotoServer, ServerProcess, free_port, wait_for

from durable_streams_server.cli import load_settings
from durable_streams_server.cluster.node.leases import Held, LeaseRecord
from durable_streams_server.cluster.node.node_settings import NodeSettings
from durable_streams_server.cluster.node.objects import open_objects
from durable_streams_server.cluster.node.renewals import replace_lease
from durable_streams_server.cluster.node.shards import Layout, lease_key
from durable_streams_server.cluster.node.supervisor import Supervisor
from durable_streams_server.cluster.node.workers import ShardServer, ShardServerSpec

pytestmark = pytest.mark.slow


def test_a_second_process_with_a_live_node_id_refuses_to_start(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Without the check, the second overwrote the node object and both served, taking each
    other's shards (a lease naming one's own id is taken at once)."""
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "2"]
    first = start_node(server_factory, storage, "n0", tmp_path)
    wait_for(serving([first], 2), timeout_s=120)
    with pytest.raises(RuntimeError) as refused:
        start_node(server_factory, storage, "n0", tmp_path / "elsewhere")
    assert "node id 'n0' is in use by a live node at " + first.url in str(refused.value)
    assert first.shards_held() == [0, 1]

    first.process.stop()  # a clean stop marks the id free: the same id starts at once
    again = start_node(server_factory, storage, "n0", tmp_path / "elsewhere")
    wait_for(serving([again], 2), timeout_s=120)


def test_take_over_force_adopts_the_wal_leases_expired_at_the_start_only(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Without the scoping, the forced node took the second WAL node's shard too once its lease
    expired (n2 held both shards), giving up records the operator never meant to give up."""
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "2"]
    storage += ["--durability", "wal", "--flush-interval-ms", "600000"]
    nodes = [start_node(server_factory, storage, f"n{index}", tmp_path) for index in range(2)]
    wait_for(serving(nodes, 2), timeout_s=120)
    dead, other = nodes
    dead.kill()

    forced = start_node(server_factory, storage, "n2", tmp_path, "--take-over", "force")
    wait_for(serving([forced, other], 2), timeout_s=120)  # (n2 adopted n0's shard; the two may swap after)
    (held,) = forced.shards_held()
    (kept,) = other.shards_held()
    other.kill()  # its WAL lease expires now, long after n2 started
    time.sleep(3 * 2)  # three lease ttls
    assert forced.shards_held() == [held]
    view = forced.describe()["shards"][kept]  # type: ignore[index]
    assert (view["state"], view["holder"]) == ("unavailable", "n1")


class StoreProxy:
    """A loopback HTTP proxy in front of moto, one request per connection: a request whose
    target holds ``slow_part`` waits ``delay_s`` before it is forwarded; while ``drop_puts`` > 0,
    a PUT whose target holds ``drop_part`` is forwarded (it lands) and its answer is dropped."""

    def __init__(self, moto: MotoServer) -> None:
        self.moto, self.port = moto, free_port()
        self.slow_part, self.delay_s = "/_cluster/", 0.0
        self.drop_part, self.drop_puts = "/_cluster/leases/", 0
        self.dropped: list[str] = []
        self._loop = asyncio.new_event_loop()

    def storage(self, uri: str) -> list[str]:
        return [arg.replace(self.moto.endpoint, f"http://127.0.0.1:{self.port}") for arg in self.moto.server_args(uri)]

    @contextlib.contextmanager
    def running(self) -> Iterator[StoreProxy]:
        thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", self.port), self._loop
        )
        server = started.result(10)
        try:
            yield self
        finally:  # (the loop runs on: nodes still running may have requests on their way)
            self._loop.call_soon_threadsafe(server.close)

    async def _relay(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        try:
            head = (await client_in.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target = head[0].split(" ")[:2]
            fields = [line for line in head[1:] if line and not line.lower().startswith("connection:")]
            size = sum(int(line.split(":")[1]) for line in fields if line.lower().startswith("content-length:"))
            body = await client_in.readexactly(size)
            if self.slow_part in target:
                await asyncio.sleep(self.delay_s)
            drop = method == "PUT" and self.drop_part in target and self.drop_puts > 0
            if drop:
                self.drop_puts -= 1
            store_in, store_out = await asyncio.open_connection("127.0.0.1", self.moto.port)
            store_out.write("\r\n".join([head[0], *fields, "Connection: close", "", ""]).encode("latin-1") + body)
            await store_out.drain()
            answer = await store_in.read(-1)
            store_out.close()
            if drop:
                self.dropped.append(target)
            else:
                client_out.write(answer)
                await client_out.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            client_out.close()


@pytest.fixture
def store(moto: MotoServer) -> Iterator[StoreProxy]:
    with StoreProxy(moto).running() as proxy:
        yield proxy


def _s3_node(factory: Callable[..., ServerProcess], store: StoreProxy, tmp: Path, shards: int) -> Node:
    bucket = f"lease-faults-{uuid.uuid4().hex[:8]}"
    store.moto.create_bucket(bucket)
    storage = [*store.storage(f"s3://{bucket}/root"), "--shards", str(shards), "--lease-ttl-s", "3"]
    node = start_node(factory, storage, "n0", tmp, "--compaction-interval-s", "0")
    wait_for(serving([node], shards), timeout_s=180)
    # (routes say "serving" for a ttl after a server is gone: the steady state is a listening
    # server for every shard too; one the node started again under load is waited for, not failed)
    wait_for(lambda: len(_shard_servers(node)) == shards, timeout_s=60, message=lambda: _warnings(node))
    return node


def _warnings(node: Node) -> str:
    """The node's warnings and errors: what a failed check reports (a restarted or fenced server)."""
    lines = node.process.log_text().splitlines()
    return "\n".join(line for line in lines if "level=warning" in line or "level=error" in line)


def _shard_servers(node: Node) -> list[int]:
    assert node.process.proc is not None
    return sorted(shard_servers(node.process.proc.pid))


def test_a_renewal_that_landed_unanswered_keeps_its_lease(
    server_factory: Callable[..., ServerProcess], store: StoreProxy, tmp_path: Path
) -> None:
    """Without the re-read, the next renewal's If-Match (the old ETag) failed: the node counted
    the lease lost and killed the healthy shard server (another pid served the shard after)."""
    node = _s3_node(server_factory, store, tmp_path, 1)
    servers = _shard_servers(node)
    store.drop_puts = 1
    wait_for(lambda: bool(store.dropped), timeout_s=30)
    time.sleep(2 * 3)  # two lease ttls: renewals go on from the version that landed
    assert node.shards_held() == [0], _warnings(node)
    assert _shard_servers(node) == servers, _warnings(node)
    assert serving([node], 1)()


def test_a_slow_store_fences_no_shard_of_four(
    server_factory: Callable[..., ServerProcess], store: StoreProxy, tmp_path: Path
) -> None:
    """Each cluster-object request takes a third of the ttl. Without concurrent renewals, 4 in a
    row took 4/3 of the ttl, past the validity (4/5 of it): every shard server was fenced."""
    node = _s3_node(server_factory, store, tmp_path, 4)
    servers = _shard_servers(node)
    store.delay_s = 3 / 3
    time.sleep(4 * 3)  # four lease ttls of a slow store
    assert node.shards_held() == [0, 1, 2, 3], _warnings(node)
    assert _shard_servers(node) == servers, _warnings(node)
    store.delay_s = 0
    assert serving([node], 4)()


def _server_of(node: Node, shard: int) -> int:
    """The pid of ``node``'s server for ``shard``: the last one its log says it started that
    is still running (a shard server's command line names no shard: its settings come on stdin)."""
    started = re.findall(rf'msg="shard server starting" shard={shard} .*?pid=(\d+)', node.process.log_text())
    running = set(_shard_servers(node))
    for pid in reversed([int(pid) for pid in started]):
        if pid in running:
            return pid
    raise AssertionError(f"no server for shard {shard}")


def test_a_hung_shard_server_is_killed_and_its_shard_served_again(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Without the probes the stopped server kept its lease (the node renewed it) and the shard
    was never served again: the appender got no acknowledgement after the SIGSTOP."""
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "2"]
    node = start_node(server_factory, storage, "n0", tmp_path)
    wait_for(serving([node], 2), timeout_s=120)
    url = f"{node.url}/v1/stream/{name_in_shard(1, 2, 'hung')}"
    assert requests.put(url, headers=JSON, timeout=30).status_code == 201
    appender = ProducerAppender(url, "p-hung", 100_000)
    appender.start()
    wait_for(lambda: len(appender.acknowledged) >= 20, timeout_s=60)

    hung = _server_of(node, 1)
    os.kill(hung, signal.SIGSTOP)
    stopped_at, count = time.monotonic(), len(appender.acknowledged)
    wait_for(lambda: len(appender.acknowledged) >= count + 20, timeout_s=60)
    assert _server_of(node, 1) != hung
    served_again_s = time.monotonic() - stopped_at
    appender.stopping.set()
    appender.join(timeout=60)
    check_history(appender.acknowledged, history(url))
    assert served_again_s < 2 * 2 + 10, served_again_s  # a ttl of silence, then a server's start


def _lease(root: Path, shard: int) -> LeaseRecord | None:
    found = open_objects(str(root), {}).get(lease_key(shard))
    return LeaseRecord.from_bytes(found.body) if found is not None else None


def _sigterm_pending(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    pending = int(next(line for line in status.splitlines() if line.startswith("ShdPnd:")).split()[1], 16)
    return bool(pending & (1 << (signal.SIGTERM - 1)))


def test_a_wal_drain_that_did_not_end_cleanly_keeps_its_lease(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Without the fix the node released the lease of the killed server at once; the joining
    node took it, asked the location's owner (the dead server, its WAL records unflushed) to
    hand over, timed out and refused to start: the shard stayed down until its owner happened
    to take the free lease again (never, when the owner is at its share)."""
    root = tmp_path / "root"
    storage = ["--storage-uri", str(root), "--shards", "2", "--lease-ttl-s", "2"]
    storage += ["--durability", "wal", "--flush-interval-ms", "600000"]  # (everything stays in the WAL)
    first = start_node(server_factory, storage, "n0", tmp_path)
    wait_for(serving([first], 2), timeout_s=120)
    url = f"{first.url}/v1/stream/{name_in_shard(1, 2, 'drain')}"  # (shard 1: the one drained first)
    assert requests.put(url, headers=JSON, timeout=30).status_code == 201
    for n in range(20):
        assert requests.post(url, data=b'{"n": %d}' % n, headers=JSON, timeout=30).status_code in (200, 204)
    server = _server_of(first, 1)

    joined = start_node(server_factory, storage, "n1", tmp_path)
    wait_for(lambda: (lease := _lease(root, 1)) is not None and lease.state == "draining", timeout_s=60)
    os.kill(server, signal.SIGSTOP)  # it never handles the SIGTERM its drain sends...
    wait_for(lambda: _sigterm_pending(server), timeout_s=30)
    os.kill(server, signal.SIGKILL)  # ...and dies unflushed, its location still its own

    def next_state() -> tuple[str | None, str]:
        lease = _lease(root, 1)
        assert lease is not None
        return lease.holder, lease.state

    wait_for(lambda: next_state() != ("n0", "draining"), timeout_s=60)
    assert next_state() == ("n0", "starting")  # kept, its server started again (not released)
    wait_for(serving([first, joined], 2), timeout_s=120)  # (then a proper handover, the drain again)
    assert history(f"{joined.url}/v1/stream/{name_in_shard(1, 2, 'drain')}") == list(range(20))
    assert "start refused" not in joined.process.log_text()


def test_a_lease_version_is_first_seen_when_its_read_answered(store: StoreProxy, tmp_path: Path) -> None:
    """Each cluster-object read takes 0.3 s. Without the fix every version of a sweep was
    recorded as first seen at the sweep's start, before the later reads had answered (so a
    version written during the sweep counted as older than it was: the SAFETY gap shrank)."""
    bucket = f"lease-look-{uuid.uuid4().hex[:8]}"
    store.moto.create_bucket(bucket)
    uri = f"s3://{bucket}/root"
    options = dict(store.moto.storage_options(), AWS_ENDPOINT_URL=f"http://127.0.0.1:{store.port}")
    objects = open_objects(uri, options)
    for shard in range(3):
        record = LeaseRecord(shard=shard, holder="other", node_url="http://other", state="serving", beat=1)
        assert objects.create(lease_key(shard), record.to_bytes()) is not None
    settings = NodeSettings("n0", "http://127.0.0.1:1", uri, "delta", lease_ttl_s=5)
    spec = ShardServerSpec("127.0.0.1", "http://127.0.0.1:1", tmp_path, "n0", 3, load_settings([]))
    supervisor = Supervisor(settings, Layout(3), objects, spec)
    store.delay_s = 0.3
    began = time.monotonic()
    supervisor._look()
    since = [supervisor._seen[shard].since - began for shard in range(3)]
    assert all(since[shard] >= 0.3 * (shard + 1) for shard in range(3)), since
    supervisor._liveness.close()
    supervisor._probe.close()
    objects.close()


def test_no_shard_server_is_started_on_a_lease_whose_validity_ended(tmp_path: Path) -> None:
    """The watchdog kills a shard server the moment its lease's validity ends, which can fall
    between a tick's fencing step and its serving step: the serving step then found an exited
    server and started it again, on a lease no longer valid (killed again 0.1 s later)."""
    uri = str(tmp_path / "root")
    objects = open_objects(uri, {})
    settings = NodeSettings("n0", "http://127.0.0.1:1", uri, "delta", lease_ttl_s=5)
    spec = ShardServerSpec("127.0.0.1", "http://127.0.0.1:1", tmp_path, "n0", 1, load_settings([]))
    supervisor = Supervisor(settings, Layout(1), objects, spec)
    record = LeaseRecord(shard=0, holder="n0", state="serving", ttl_ms=5000)
    etag = objects.create(lease_key(0), record.to_bytes())
    assert etag is not None
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()  # (as the watchdog left it)
    supervisor._held[0] = Held(record, etag, valid_until=time.monotonic() - 0.01)
    supervisor._servers[0] = ShardServer(0, "http://127.0.0.1:1", killed)
    supervisor._serve()
    try:
        assert supervisor._servers[0].proc is killed, "a shard server was started on an expired lease"
    finally:
        supervisor._servers[0].kill()


def test_a_shard_server_that_fails_to_start_is_started_again_before_its_lease_is_released(tmp_path: Path) -> None:
    """A shard server killed (SIGKILL) while it starts: its node starts it again with the same
    take-over, keeping the lease, and it serves; only a shard whose server fails START_ATTEMPTS
    starts in a row is released. Before, the first failed start released the lease, and a node
    that held its share took the shard (CI: a take-over on a slow machine in kill_9_node)."""
    uri = str(tmp_path / "root")
    objects = open_objects(uri, {})
    settings = NodeSettings("n0", "http://127.0.0.1:1", uri, "delta", lease_ttl_s=5)
    spec = ShardServerSpec("127.0.0.1", "http://127.0.0.1:1", tmp_path, "n0", 2, load_settings([]))
    supervisor = Supervisor(settings, Layout(2), objects, spec)

    def lease(shard: int) -> LeaseRecord:
        found = objects.get(lease_key(shard))
        assert found is not None
        return LeaseRecord.from_bytes(found.body)

    def kill_starting(shard: int) -> None:
        server = supervisor._servers[shard]
        assert supervisor._held[shard].record.state == "starting" and not server.exited
        server.proc.kill()
        server.proc.wait()
        supervisor._serve()

    def hold_starting(shard: int) -> None:
        record = LeaseRecord(shard=shard, holder="n0", state="starting", ttl_ms=5000)
        etag = objects.create(lease_key(shard), record.to_bytes())
        assert etag is not None
        supervisor._held[shard] = Held(record, etag, valid_until=time.monotonic() + 600)
        uri_of_shard = Layout(2).shard_uri(uri, shard)
        supervisor._servers[shard] = spec.start(shard, uri_of_shard, take_over="ask", take_over_timeout_s=0.0)

    try:
        hold_starting(1)
        for attempt in (1, 2):
            kill_starting(1)
            assert 1 in supervisor._servers, f"released after {attempt} failed start(s)"
            assert supervisor._servers[1].attempt == attempt + 1 and lease(1).holder == "n0"
        kill_starting(1)
        assert 1 not in supervisor._held and 1 not in supervisor._servers
        assert lease(1).free, "a shard whose server failed every start kept its lease"
        hold_starting(0)
        kill_starting(0)
        again = supervisor._servers[0]
        assert (again.attempt, again.take_over, again.take_over_timeout_s) == (2, "ask", 0.0)
        assert lease(0).holder == "n0" and not lease(0).free
        wait_for(lambda: (supervisor._serve(), lease(0).state == "serving")[1], timeout_s=60, interval_s=0.2)
        assert supervisor._servers[0] is again and lease(0).url == again.url
        assert requests.get(f"{again.url}/readyz", timeout=10).status_code == 200
    finally:
        for server in supervisor._servers.values():
            server.kill()
        spec.spare.close()
        supervisor._liveness.close()
        supervisor._probe.close()
        objects.close()


def test_a_shard_server_is_ready_only_when_its_own_process_answers(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Another process listening on the port a node chose for its shard server (free when
    chosen) answers ``/readyz`` 200: the node published the shard at that stranger's URL, and
    its clients' reads were answered 404 there (CI: ``test_shard_tables``, another test's
    server on the port). Ready now means the answer names the shard server's own pid."""
    stranger = server_factory()
    assert stranger.proc is not None
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # (starting, not yet listening)
    probe = httpx.Client()
    try:
        assert not ShardServer(0, stranger.url, ours).ready(probe)
        assert ShardServer(0, stranger.url, stranger.proc).ready(probe)
    finally:
        probe.close()
        ours.kill()
        ours.wait()


def test_a_late_landing_write_of_this_nodes_own_is_not_a_lost_lease(tmp_path: Path) -> None:
    """A renewal whose answer was lost and which landed only after it was read back: the next
    write's If-Match meets this node's own version, which it writes over (before: the lease was
    taken for lost, its shard server killed, and a WAL lease left naming a node that no longer
    held it). A version naming another node, or a released one, stays lost."""
    objects = open_objects(str(tmp_path / "root"), {})
    first = LeaseRecord(shard=0, holder="n0", state="serving", durability="wal", ttl_ms=5000)
    stale = objects.create(lease_key(0), first.to_bytes())
    assert stale is not None
    late = objects.replace(lease_key(0), first.next_beat().to_bytes(), stale)  # (the write that landed late)
    assert late is not None
    written = replace_lease(objects, 0, first.next_beat().next_beat(), stale)
    assert written is not None and written not in (stale, late)
    found = objects.get(lease_key(0))
    assert found is not None and LeaseRecord.from_bytes(found.body).beat == 2
    other = LeaseRecord(shard=0, holder="n1", state="starting", durability="wal", ttl_ms=5000)
    assert objects.replace(lease_key(0), other.to_bytes(), written) is not None
    assert replace_lease(objects, 0, first.next_beat(), written) is None


def test_a_node_takes_back_a_wal_lease_that_still_names_it_whatever_its_share(tmp_path: Path) -> None:
    """A WAL lease this node lost (its renewal failed) still names it: no other node may take it
    (the records may be on this node's disk), so this node must, even at its share; before, a node
    at its share left it, and the shard was unavailable for good."""
    uri = str(tmp_path / "root")
    objects = open_objects(uri, {})
    settings = NodeSettings("n0", "http://127.0.0.1:1", uri, "wal", lease_ttl_s=5)
    spec = ShardServerSpec("127.0.0.1", "http://127.0.0.1:1", tmp_path, "n0", 2, load_settings([]))
    supervisor = Supervisor(settings, Layout(2), objects, spec)
    supervisor.live_nodes = ("n0", "n1")  # (two shards, two nodes: its share is one)
    lost = LeaseRecord(shard=0, holder="n0", state="serving", durability="wal", ttl_ms=5000, url="http://x")
    assert objects.create(lease_key(0), lost.to_bytes()) is not None
    held = LeaseRecord(shard=1, holder="n0", state="serving", durability="wal", ttl_ms=5000)
    etag = objects.create(lease_key(1), held.to_bytes())
    assert etag is not None
    supervisor._held[1] = Held(held, etag, valid_until=time.monotonic() + 60)
    supervisor._look()
    supervisor._balance()
    try:
        assert sorted(supervisor._held) == [0, 1], "a WAL lease naming this node was left"
    finally:
        for server in supervisor._servers.values():
            server.kill()


def test_a_shutdown_slower_than_the_lease_ttl_keeps_its_leases_until_it_ends(
    server_factory: Callable[..., ServerProcess], store: StoreProxy, tmp_path: Path
) -> None:
    """A node stopping while its store is slow: its shard server's release (a Delta commit) takes
    longer than a lease ttl. The node renews its leases until its shutdown ends, so the other node
    takes the shard only once it was released (a free lease), never as an expired one while the
    old server is still flushing and releasing (when the renewer stopped first, it did: ``from=n0``)."""
    bucket = f"lease-faults-{uuid.uuid4().hex[:8]}"
    store.moto.create_bucket(bucket)
    storage = [*store.storage(f"s3://{bucket}/root"), "--shards", "1", "--lease-ttl-s", "3", "--durability", "delta"]
    first = start_node(server_factory, storage, "n0", tmp_path, "--compaction-interval-s", "0")
    wait_for(serving([first], 1), timeout_s=180)
    second = start_node(server_factory, storage, "n1", tmp_path, "--compaction-interval-s", "0")
    name = name_in_shard(0, 1, "slow-stop")
    assert requests.put(f"{first.url}/v1/stream/{name}", headers=JSON, timeout=30).status_code == 201
    acknowledged = []
    for n in range(10):
        answer = requests.post(f"{first.url}/v1/stream/{name}", data=b'{"n": %d}' % n, headers=JSON, timeout=30)
        assert answer.status_code in (200, 204), answer.text
        acknowledged.append(n)
    store.slow_part, store.delay_s = "/shard-", 1.5  # the shard's Delta table, not the leases
    began = time.monotonic()
    first.process.stop()  # SIGTERM: announce, stop the shard server (its release commit is slow), release
    took_s = time.monotonic() - began
    store.delay_s = 0.0
    stopped = first.process.log_text()
    assert "lease validity ended" not in stopped and "shard lost" not in stopped, stopped[-3000:]
    assert took_s > 3, f"the shutdown took {took_s:.1f} s, not longer than the lease ttl: nothing was shown"
    wait_for(lambda: second.shards_held() == [0], timeout_s=60)
    acquired = [line for line in second.process.log_text().splitlines() if 'msg="shard acquired"' in line]
    assert acquired and all("from=None" in line for line in acquired), acquired
    check_history(acknowledged, history(f"{second.url}/v1/stream/{name}"))
