"""Writing the leases a node holds: renewals on a schedule of their own, and writes whose
outcome the store left unknown.

* **Concurrently.** Every held lease is renewed once a tick, each by one request on a small
  thread pool (``Renewer``), so K shards do not take K store latencies in a row: during a
  store slowdown a sequential pass outgrew the lease's validity and fenced every shard. A
  lease's next renewal is sent a tick after its previous one was *sent* (not answered), and
  never while the previous one is still waiting; one shard's writes are serialized by its lock
  (``LeaseLocks``), never another shard's.
* **After an uncertain write** (a timeout or a transport error: ``ObjectStoreError``) the
  write may have landed, and the next ``If-Match`` with the old ETag would fail and kill a
  healthy shard server. So the lease is read again (``replace_lease``): if its body is the
  record just sent (same holder, same beat), its ETag is adopted and the lease kept; if it is
  still the version the write meant to replace, the write did not land (the error stands); any
  other version is another node's (lost). A write that landed only *after* that read back is
  met by the next write's ``If-Match``: a current version naming this node as its holder is
  this node's own (no other node writes one), and is written over, not taken as lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from .leases import LeaseFormatError, LeaseRecord
from .objects import ConditionalObjects, ObjectStoreError
from .shards import lease_key

log = logging.getLogger("durable_streams_server.cluster")
RENEWAL_THREADS = 8


def replace_lease(objects: ConditionalObjects, shard: int, record: LeaseRecord, etag: str) -> str | None:
    """Write ``record`` over the lease version ``etag``: the new ETag; ``None``: another version is
    current (lost); ``ObjectStoreError``: the outcome is still unknown (module docstring)."""
    key = lease_key(shard)
    try:
        written = objects.replace(key, record.to_bytes(), etag)
        if written is None and record.holder is not None:
            written = _over_own_late_write(objects, shard, record)
        return written
    except ObjectStoreError as uncertain:
        found = objects.get(key)  # (an error here leaves the outcome unknown too)
        if found is None:
            return None
        if found.etag == etag:
            raise uncertain  # it did not land
        try:
            landed = LeaseRecord.from_bytes(found.body) == record
        except LeaseFormatError:
            landed = False
        if landed:
            log.info("uncertain lease write had landed: kept", extra={"shard": shard, "beat": record.beat})
            return found.etag
        return None


class LeaseLocks:
    """One lock per shard: a shard's lease writes (renewal, state change, release) never race."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[int, threading.Lock] = {}

    def __call__(self, shard: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(shard, threading.Lock())


class Renewer:
    """Calls ``renew(shard)`` for each of ``held()`` every ``every_s`` from its last start, on a
    thread pool, until ``closed`` is set (module docstring)."""

    def __init__(
        self, held: Callable[[], Iterable[int]], renew: Callable[[int], None], every_s: float, closed: threading.Event
    ) -> None:
        self._held, self._renew, self._every_s, self._closed = held, renew, every_s, closed
        self._sent: dict[int, float] = {}
        self._waiting: set[int] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="cluster-lease-renewer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        with ThreadPoolExecutor(RENEWAL_THREADS, thread_name_prefix="cluster-lease-renewal") as pool:
            while not self._closed.wait(min(0.05, self._every_s / 4)):
                now = time.monotonic()
                for shard in list(self._held()):
                    with self._lock:
                        if shard in self._waiting or now - self._sent.get(shard, -1e9) < self._every_s:
                            continue
                        self._waiting.add(shard)
                        self._sent[shard] = now
                    pool.submit(self._one, shard)

    def _one(self, shard: int) -> None:
        try:
            self._renew(shard)
        except Exception:  # a bug in one renewal must not stop the others
            log.exception("lease renewal failed unexpectedly", extra={"shard": shard})
        finally:
            with self._lock:
                self._waiting.discard(shard)


def _over_own_late_write(objects: ConditionalObjects, shard: int, record: LeaseRecord) -> str | None:
    """``record`` again over the current version when that version is this node's own: a write
    whose answer was lost and which landed only after it was read back (no other node writes a
    record naming this node as its holder: ``membership`` keeps one process per node id)."""
    found = objects.get(lease_key(shard))
    if found is None:
        return None
    try:
        current = LeaseRecord.from_bytes(found.body)
    except LeaseFormatError:
        return None
    if current.holder != record.holder or current.free:
        return None
    log.info("a late write of this node's own was the current lease: written over", extra={"shard": shard})
    return objects.replace(lease_key(shard), record.to_bytes(), found.etag)
