"""A node's object (``_cluster/nodes/<id>.json``): its heartbeat, which nodes are live, and
one process per node id.

Every tick a node rewrites its object (``Membership.beat``); a node whose object has not
changed for a ttl of the reader's clock is not live, and one whose last write says
``stopped`` (a clean shutdown) is not live at once.

One node id, one process
------------------------
A lease names its holder by node id, and a node takes a lease naming its own id at once (a
restart takes its shards back). Two live processes with one id would thus take each other's
shards without a handover. So every node process draws a random **incarnation** when it
starts and writes it in its object, and:

* a node that starts while its id's object changes within a ttl (another live process
  beats it) refuses to start (``IdInUse``, naming the id and that node's URL): it watches
  the object for a ttl first, unless the object is absent or says ``stopped``
  (``wait_until_id_free``);
* a running node that finds its object written by another incarnation (two started at
  once, past each other's check) stops claiming shards and stops beating, and says so
  (``Membership.usurped``); the operator stops one of them.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from .leases import LeaseRecord, Observed
from .objects import ConditionalObjects
from .shards import NODES_PREFIX, node_key

log = logging.getLogger("durable_streams_server.cluster")


@dataclass(frozen=True)
class NodeObject:
    """The body of a node's object."""

    node_id: str
    url: str | None = None
    """The node's advertised URL (named to a second process with its id)."""
    incarnation: str | None = None
    """The writing process's random id (``None``: written before incarnations)."""
    beat: int = 0
    stopped: bool = False
    """Written last by a clean shutdown: the id is free at once."""

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "node_id": self.node_id,
                "url": self.url,
                "incarnation": self.incarnation,
                "beat": self.beat,
                "stopped": self.stopped,
            }
        ).encode()

    @classmethod
    def from_bytes(cls, node_id: str, body: bytes) -> NodeObject:
        """Whatever can be read of it (an unreadable one: only its id, as if written by an unknown process)."""
        try:
            fields = json.loads(body)
            return cls(
                node_id,
                fields.get("url"),
                fields.get("incarnation"),
                int(fields.get("beat", 0)),
                bool(fields.get("stopped", False)),
            )
        except (ValueError, TypeError, AttributeError):
            return cls(node_id)


class IdInUse(Exception):
    """Another live node process runs with this node id."""


def wait_until_id_free(objects: ConditionalObjects, node_id: str, ttl_s: float) -> None:
    """Return once no other live process runs as ``node_id``; raise ``IdInUse`` if one does (its
    object changes within a ttl of watching: module docstring)."""
    key = node_key(node_id)
    first = objects.get(key)
    if first is None or NodeObject.from_bytes(node_id, first.body).stopped:
        return
    started = time.monotonic()
    while time.monotonic() - started < ttl_s:
        time.sleep(min(ttl_s / 10, max(0.0, ttl_s - (time.monotonic() - started))))
        found = objects.get(key)
        if found is None:
            return
        if found.etag != first.etag:
            other = NodeObject.from_bytes(node_id, found.body)
            if other.stopped:
                return
            raise IdInUse(
                f"node id {node_id!r} is in use by a live node at {other.url or 'an unknown URL'} "
                f"(incarnation {other.incarnation}): its node object {key} changed within a lease ttl "
                f"({ttl_s:g} s). Give this node another --node-id (or data dir), or stop that node first."
            )
    log.info("node id free: its object did not change for a lease ttl", extra={"node_id": node_id})


class Membership:
    """This node's object, beaten every tick, and the live nodes seen (module docstring)."""

    def __init__(self, objects: ConditionalObjects, node_id: str, url: str, incarnation: str, ttl_s: float) -> None:
        self.objects = objects
        self.node_id, self.url, self.incarnation, self.ttl_s = node_id, url, incarnation, ttl_s
        self.usurped: str | None = None
        """Set (to the other process's URL) once another incarnation wrote this node's object."""
        self._etag: str | None = None
        self._beat = 0
        self._seen: dict[str, Observed] = {}

    def beat(self) -> tuple[str, ...]:
        """Rewrite this node's object; the live nodes' ids (this one's included), sorted."""
        if self.usurped is None:
            self._write(NodeObject(self.node_id, self.url, self.incarnation, self._beat + 1))
        return self._live()

    def stopped(self) -> None:
        """Say that this process is gone (a clean shutdown): its id is free at once."""
        if self.usurped is None and self._etag is not None:
            body = NodeObject(self.node_id, self.url, self.incarnation, self._beat + 1, stopped=True)
            self.objects.replace(node_key(self.node_id), body.to_bytes(), self._etag)

    def _write(self, body: NodeObject) -> None:
        key = node_key(self.node_id)
        etag = self.objects.replace(key, body.to_bytes(), self._etag) if self._etag else None
        if etag is None:
            current = self.objects.get(key)
            if current is None:
                etag = self.objects.create(key, body.to_bytes())
            else:
                other = NodeObject.from_bytes(self.node_id, current.body)
                if self._etag is not None and other.incarnation != self.incarnation:
                    self.usurped = other.url or "an unknown URL"
                    log.error(
                        "another process runs with this node id: this one stops claiming shards",
                        extra={"node_id": self.node_id, "other_url": other.url, "other": other.incarnation},
                    )
                    return
                etag = self.objects.replace(key, body.to_bytes(), current.etag)
        self._etag = etag
        self._beat = body.beat

    def _live(self) -> tuple[str, ...]:
        live = [self.node_id]
        for key in self.objects.list_keys(NODES_PREFIX):
            node_id = key.rsplit("/", 1)[-1].removesuffix(".json")
            if node_id == self.node_id:
                continue
            found = self.objects.get(key)
            now = time.monotonic()  # (after the read: a version is first seen when its read answered)
            if found is None:
                continue
            record = LeaseRecord(shard=-1, holder=node_id, state="serving", ttl_ms=int(self.ttl_s * 1000))
            seen = self._seen.get(node_id)
            seen = Observed(record, found.etag, now) if seen is None else seen.seen_again(record, found.etag, now)
            self._seen[node_id] = seen
            if not seen.expired(now) and not NodeObject.from_bytes(node_id, found.body).stopped:
                live.append(node_id)
        return tuple(sorted(live))
