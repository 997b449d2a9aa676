"""A cluster node's supervisor: it holds shard leases, runs a server per held shard, and
keeps the routing table its router answers from.

Theory of operation
-------------------
One thread (``Supervisor.run``) ticks every ``tick_s`` (a fifth of the lease ttl). Each tick:
1. **Beat**: rewrite this node's object (``_cluster/nodes/<id>.json``), so others count it
   live; a node whose object has not changed for a ttl of the reader's clock is not live.
   One process per node id (``membership``): a node that finds its object written by
   another process claims nothing more.
2. **Renew** every held lease (``leases``) -- on threads of their own, every tick, each lease
   by one request of its own (``renewals``), so a slow store read in the other steps never
   delays a renewal, nor does one shard's renewal another's; a lease lost to a newer version, or
   not renewed before its validity ends, has its shard server killed at once (a watchdog
   thread checks validity every 0.1 s).
3. **Look**: read every shard's lease, and publish the routing table (``routes``) that the
   router reads without locks (one attribute, replaced whole). A lease that cannot be
   read (not a lease record) is never taken: its holder is unknown, so the shard stays
   unavailable, logged as an error, until an operator removes the object.
4. **Serve**: a shard whose server is ready is published ``serving`` at the server's URL; a
   server that has not answered a probe for a lease ttl is killed (``probes``); a
   server that exited by itself is started again (the same node takes its location back,
   replaying its WAL), and so is one that exited before it was ready, a few times
   (``workers.START_ATTEMPTS``) before its lease is released for another node to try; one
   stopped for a drain has its lease released once it exited -- except a WAL-durability
   server that did not exit cleanly (killed at the drain's timeout, or failed): its records
   may be on this node's disk only and its location still names it, so the lease is kept and
   the server started again (``workers.ShardServer.may_let_go``); the drain comes again.
5. **Balance** (the rule is ``balance``'s): a node below its share takes free shards and
   those ``leases.may_take`` allows; a node above it drains one serving shard at a time, and
   another node takes it; shards never move between nodes that hold their share. A starting
   shard is never drained: its server may be taking the location over from a dead owner. A
   node that takes a lease asks the location's owner to hand over, even when the lease was
   free (``_acquire``); a WAL lease that still names this node is taken back whatever its
   share (no other node may take it: ``lease_view.LeaseView.names_this_wal``).

A drain first **announces** itself: the lease is written ``draining`` (no URL), and the
shard's server keeps serving for ``drain_notice_s`` (two ticks) before it is asked to stop.
Every router reads the leases once a tick, so by then none still sends a client to a server
that is about to close its socket: they answer 503 with ``Retry-After`` instead, which every
client asks again, where a redirect to a closing server would meet a refused or dropped
connection. Then the server flushes what it acknowledged and releases its location, and the
lease is released. Shutdown announces every held shard the same way.

Every shard server is started from this thread (``workers``: the kernel kills it when this thread
ends). On shutdown the node announces its drains, stops its servers (each flushes and releases its
location), then releases their leases (a WAL-durability server that did not exit cleanly keeps its
lease, left to expire: only this node takes it back); the renewer and the watchdog run until that
is done, so a slow flush never outlives its lease. Between ticks the thread sleeps, waking every
``STARTING_POLL_S`` only while a shard server is starting.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

import httpx

from .balance import cold_start_wait, should_drain
from .lease_view import LeaseView
from .leases import Held, LeaseRecord, Observed, WalAdoption, may_take, target_count
from .membership import Membership
from .node_settings import NodeSettings
from .objects import ConditionalObjects, ObjectStoreError
from .probes import Liveness
from .renewals import LeaseLocks, Renewer, replace_lease
from .routes import Route, routing_table
from .shard_tables import ShardTables
from .shards import Layout, lease_key
from .start_failures import StartFailures
from .workers import START_ATTEMPTS, TAKE_OVER_TIMEOUT_S, ShardServer, ShardServerSpec, TakeOverPlan

log = logging.getLogger("durable_streams_server.cluster")

DRAIN_TIMEOUT_S = 60.0
WATCHDOG_S = 0.1
STARTING_POLL_S = 0.1
"""How often, between ticks, a starting shard server is asked whether it is ready (an idle node
sleeps until its next tick)."""


class Supervisor:
    """The node's tick loop (module docstring) and the routing table it publishes."""

    def __init__(
        self, settings: NodeSettings, layout: Layout, objects: ConditionalObjects, spec: ShardServerSpec
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.objects = objects
        self.spec = spec
        self.routes: tuple[Route, ...] = tuple(Route("unavailable") for _ in range(layout.shards))
        self.live_nodes: tuple[str, ...] = (settings.node_id,)
        self.membership = Membership(
            objects, settings.node_id, settings.advertise_url, settings.incarnation, settings.lease_ttl_s
        )
        self._adoption = WalAdoption(settings.adopt_wal)
        self._leases = LeaseView(objects, layout.shards, settings.node_id, self._adoption)
        self._tables = ShardTables(objects, layout, settings.storage_uri, spec)
        self.start_failures = StartFailures()
        self._held: dict[int, Held] = {}
        self._servers: dict[int, ShardServer] = {}
        self._released_at: dict[int, float] = {}
        self._started_at = time.monotonic()
        self._stop = threading.Event()
        self._closed = threading.Event()  # set once shutdown is over: the renewer and watchdog run until then
        self._announced: dict[int, float] = {}  # shards whose drain was announced (``draining``), and when
        self._thread = threading.Thread(target=self.run, name="cluster-supervisor", daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name="cluster-lease-watchdog", daemon=True)
        self._renewer = Renewer(lambda: list(self._held), self._renew, settings.tick_s, self._closed)
        self._lease_lock = LeaseLocks()
        """A shard's lock is held while its lease is written (renewed, changed, released), so the
        renewer and the tick never race each other's conditional writes on one lease."""
        self._probe = httpx.Client()
        self._liveness = Liveness(self._probe)

    @property
    def held(self) -> tuple[int, ...]:
        return tuple(sorted(self._held))

    def start(self) -> None:
        self._started_at = time.monotonic()
        self._thread.start()
        self._watchdog.start()
        self._renewer.start()

    @property
    def drain_notice_s(self) -> float:
        """How long a drain is announced before the shard's server is stopped (module docstring)."""
        return 2 * self.settings.tick_s

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._closed.set()
        self._watchdog.join()
        self._renewer.join()
        self._liveness.close()
        self._probe.close()

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        while not self._stop.is_set():
            next_tick = time.monotonic() + self.settings.tick_s
            self.tick()
            while not self._stop.wait(max(0.0, min(self._poll_s(), next_tick - time.monotonic()))):
                if time.monotonic() >= next_tick:
                    break
                self._publish_ready()
        self._shut_down()

    def _poll_s(self) -> float:
        starting = any(held.record.state == "starting" for held in self._held.values())
        return STARTING_POLL_S if starting else self.settings.tick_s

    def _publish_ready(self) -> None:
        """Between ticks, a starting shard server that became ready is published ``serving`` at
        once, not up to a tick later (a fifth of the ttl)."""
        for shard, held in list(self._held.items()):
            server = self._servers.get(shard)
            if held.record.state != "starting" or server is None or time.monotonic() >= held.valid_until:
                continue
            try:
                if self._serving_if_ready(shard, held, server):
                    self._publish()
            except ObjectStoreError as exc:  # (the next tick tries again)
                log.warning("cluster step failed", extra={"step": "publish_ready", "error": str(exc)})

    def _serving_if_ready(self, shard: int, held: Held, server: ShardServer) -> bool:
        if server.exited or not server.ready(self._probe):
            return False
        self._write_held(shard, held.record.next_beat(state="serving", url=server.url))
        log.info("shard serving", extra={"shard": shard, "url": server.url})
        self._tables.record(shard)
        return True

    def _watch(self) -> None:
        """Kill a shard's server the moment its lease's validity ends, whatever the tick is
        doing (a renewal may hang on the store for its whole timeout); the tick then drops it."""
        while not self._closed.wait(WATCHDOG_S):
            now = time.monotonic()
            for shard, held in list(self._held.items()):
                server = self._servers.get(shard)
                if now >= held.valid_until and server is not None and not server.exited:
                    server.proc.kill()
                    log.warning("lease validity ended: shard server killed", extra={"shard": shard})

    def tick(self) -> None:
        """One pass of the steps (module docstring); a step the store fails is logged and the
        others still run (the routes are published from what is known)."""
        for step in (
            self._fence_expired,
            self._beat_node,
            self._look,
            self._probe_servers,
            self._serve,
            self._balance,
            self._publish,
            self._keep_spare,
        ):
            try:
                step()
            except ObjectStoreError as exc:
                log.warning("cluster step failed", extra={"step": step.__name__.lstrip("_"), "error": str(exc)})
            except Exception:  # a bug in one step must not end the loop that serves every shard
                log.exception("cluster step failed unexpectedly", extra={"step": step.__name__.lstrip("_")})

    def _fence_expired(self) -> None:
        for shard in list(self._held):
            with self._lease_lock(shard):
                held = self._held.get(shard)
                if held is not None and time.monotonic() >= held.valid_until:
                    self._lose(shard, "its lease could not be renewed in time")

    def _beat_node(self) -> None:
        self.live_nodes = self.membership.beat()

    def _renew(self, shard: int) -> None:
        """Renew one held lease (on the renewer's pool: ``renewals``)."""
        with self._lease_lock(shard):
            held = self._held.get(shard)
            if held is None:
                return
            sent = time.monotonic()
            record = held.record.next_beat()
            try:
                etag = replace_lease(self.objects, shard, record, held.etag)
            except ObjectStoreError as exc:
                log.warning("lease renewal failed", extra={"shard": shard, "error": str(exc)})
                return
            if etag is None:
                self._lose(shard, "another node replaced its lease")
                return
            self._held[shard] = Held(record, etag, Held.valid_from(sent, record.ttl_ms))

    def _lose(self, shard: int, why: str) -> None:
        self._announced.pop(shard, None)
        server = self._servers.pop(shard, None)
        if server is not None:
            server.kill()
        self._held.pop(shard, None)
        log.warning("shard lost", extra={"shard": shard, "reason": why})

    def _look(self) -> None:
        self._leases.look(self._held)

    @property
    def _seen(self) -> dict[int, Observed]:
        return self._leases.seen

    def _probe_servers(self) -> None:
        """Kill a serving shard server that has not answered for a lease ttl (``probes``); ``_serve``
        then starts it again, as any server that exited."""
        answering = {
            shard: server
            for shard, server in self._servers.items()
            if shard in self._held
            and self._held[shard].record.state in ("serving", "draining")
            and server.stopping_since is None
            and not server.exited
        }
        self._liveness.kill_hung(answering, self.settings.lease_ttl_s)

    def _serve(self) -> None:
        for shard, server in list(self._servers.items()):
            held = self._held.get(shard)
            if held is None or time.monotonic() >= held.valid_until:
                continue  # (a lease whose validity ended is dropped at the next tick: nothing is started on it)
            announced = self._announced.get(shard)
            if announced is not None and server.stopping_since is None:
                if server.exited:  # it died during the notice: started again below, like any exit
                    self._announced.pop(shard)
                else:
                    if time.monotonic() - announced >= self.drain_notice_s:
                        server.stop()
                    continue
            if server.stopping_since is not None:
                if server.exited or time.monotonic() - server.stopping_since > DRAIN_TIMEOUT_S:
                    server.kill()
                    if server.may_let_go(self.settings.durability):
                        self._release(shard)
                    else:  # (its records are on this node's disk: it serves them again, drains later)
                        self._announced.pop(shard, None)
                        self._servers[shard] = self._start_server(shard, take_over="no")
                        self._write_held(shard, held.record.next_beat(state="starting", url=None))
                continue
            if server.exited and held.record.state == "starting":  # (``workers.START_ATTEMPTS``)
                failed = {"shard": shard, "code": server.proc.returncode, "attempt": server.attempt}
                released = server.attempt >= START_ATTEMPTS
                self.start_failures.failed(shard, server, self.spec.shard_data_dir(shard), lease_released=released)
                if not released:
                    log.warning("shard server failed to start; starting it again", extra=failed)
                    self._servers[shard] = self.spec.start_again(server, self._uri(shard))
                else:
                    log.error("shard server failed to start: lease released", extra=failed)
                    self._release(shard)
            elif server.exited:
                log.warning(
                    "shard server exited; starting it again", extra={"shard": shard, "code": server.proc.returncode}
                )
                self._servers[shard] = self._start_server(shard, take_over="no")
                self._write_held(shard, held.record.next_beat(state="starting", url=None))
            elif held.record.state == "starting":
                self._serving_if_ready(shard, held, server)

    def _balance(self) -> None:
        if self.membership.usurped is not None:
            return  # another process runs with this node id: claim nothing (``membership``)
        if self._announced or any(server.stopping_since is not None for server in self._servers.values()):
            return  # one drain at a time
        shards, live = self.layout.shards, self.live_nodes
        target = target_count(shards, len(live))
        now = time.monotonic()
        anyone_holds = bool(self._held) or self._leases.anyone_holds()
        if cold_start_wait(anyone_holds, len(self._held), now - self._started_at, self.settings.lease_ttl_s):
            return  # (nodes started together see each other first: ``balance``)
        if should_drain(shards, self.settings.node_id, self._leases.held_by(self.live_nodes, len(self._held))):
            serving = [shard for shard, held in self._held.items() if held.record.state == "serving"]
            if not serving:
                return  # (a starting server may be taking its location over: it is not interrupted)
            shard = max(serving)
            self._announce_drain(shard)
            log.info("shard draining", extra={"shard": shard, "target": target, "live_nodes": len(live)})
            return
        for shard in range(shards):
            if shard in self._held or shard in self._leases.unreadable:
                continue
            if len(self._held) >= target and not self._leases.names_this_wal(shard):
                continue
            if now - self._released_at.get(shard, -1e9) < self.settings.lease_ttl_s:
                continue  # (just given up for another node to take)
            seen = self._seen.get(shard)
            if seen is not None and not may_take(
                seen, self.settings.node_id, now, adopt_wal=self._adoption.allows(shard, seen)
            ):
                continue
            self._acquire(shard, seen)

    def _announce_drain(self, shard: int) -> None:
        """Write ``shard``'s lease ``draining`` (routers stop sending clients to its server); its
        server is stopped ``drain_notice_s`` later (``_serve``)."""
        self._write_held(shard, self._held[shard].record.next_beat(state="draining", url=None))
        if shard in self._held:
            self._announced[shard] = time.monotonic()

    def _acquire(self, shard: int, seen: Observed | None) -> None:
        if not self._tables.expect(shard):  # (its server must find the table recorded: ``shard_tables``)
            return
        ttl_ms = int(self.settings.lease_ttl_s * 1000)
        record = LeaseRecord(
            shard=shard,
            holder=self.settings.node_id,
            node_url=self.settings.advertise_url,
            state="starting",
            durability=self.settings.durability,
            ttl_ms=ttl_ms,
            beat=seen.record.beat + 1 if seen is not None else 0,
        )
        sent = time.monotonic()
        if seen is None:
            etag = self.objects.create(lease_key(shard), record.to_bytes())
        else:
            etag = self.objects.replace(lease_key(shard), record.to_bytes(), seen.etag)
        if etag is None:
            return  # another node was faster
        self._held[shard] = Held(record, etag, Held.valid_from(sent, ttl_ms))
        self._seen.pop(shard, None)
        plan = TakeOverPlan.of(seen.record if seen is not None else None, self.settings.node_id)
        if plan.mode == "force":
            self._adoption.used(shard)  # (once: ``WalAdoption``)
        log.info(
            "shard acquired",
            extra={"shard": shard, "from": plan.taken_from, "take_over": plan.mode, "owner_wait_s": plan.owner_wait_s},
        )
        self._servers[shard] = self._start_server(shard, take_over=plan.mode, owner_wait_s=plan.owner_wait_s)

    def _start_server(self, shard: int, *, take_over: str, owner_wait_s: float = TAKE_OVER_TIMEOUT_S) -> ShardServer:
        return self.spec.start(shard, self._uri(shard), take_over=take_over, take_over_timeout_s=owner_wait_s)

    def _uri(self, shard: int) -> str:
        return self.layout.shard_uri(self.settings.storage_uri, shard)

    def _write_held(self, shard: int, record: LeaseRecord) -> None:
        with self._lease_lock(shard):
            held = self._held[shard]
            sent = time.monotonic()
            etag = replace_lease(self.objects, shard, record, held.etag)
            if etag is None:
                self._lose(shard, "another node replaced its lease")
                return
            self._held[shard] = Held(record, etag, Held.valid_from(sent, record.ttl_ms))

    def _release(self, shard: int) -> None:
        with self._lease_lock(shard):
            held = self._held.pop(shard)
            self._servers.pop(shard, None)
            self._announced.pop(shard, None)
            self._released_at[shard] = time.monotonic()
            free = replace(held.record.next_beat(), holder=None, node_url=None, url=None, state="released")
            if replace_lease(self.objects, shard, free, held.etag) is not None:
                log.info("shard released", extra={"shard": shard})

    def _publish(self) -> None:
        self.routes = routing_table(self.layout.shards, self._held, self._seen, time.monotonic())
        for shard in (shard for shard, route in enumerate(self.routes) if route.state == "serving"):
            self.start_failures.served(shard)  # (served here or by another node: its failures are past)

    def _keep_spare(self) -> None:  # (``workers.SpareServer``: started once no server is starting)
        if not any(held.record.state == "starting" for held in self._held.values()):
            self.spec.spare.refill()

    def _shut_down(self) -> None:
        for shard in list(self._servers):
            if shard in self._held and shard not in self._announced:
                try:
                    self._announce_drain(shard)
                except ObjectStoreError as exc:
                    log.warning("drain announcement failed at shutdown", extra={"shard": shard, "error": str(exc)})
        self._publish()
        if self._announced:
            time.sleep(max(0.0, max(self._announced.values()) + self.drain_notice_s - time.monotonic()))
        for server in self._servers.values():
            server.stop()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        for shard, server in list(self._servers.items()):
            try:
                server.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:
                server.kill()
            try:
                if server.may_let_go(self.settings.durability):  # (else it expires: only this node takes it back)
                    self._release(shard)
            except ObjectStoreError as exc:
                log.warning("lease release failed at shutdown", extra={"shard": shard, "error": str(exc)})
        self.spec.spare.close()
        try:
            self.membership.stopped()
        except ObjectStoreError as exc:
            log.warning("node object not marked stopped at shutdown", extra={"error": str(exc)})
