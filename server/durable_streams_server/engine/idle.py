"""Streams idle in memory go back to sleep, so what the server keeps per stream follows the
streams in use, not every stream used since the start.

A restart leaves ordinary streams dormant (``stream_index``: their state as read, no
``Stream``), and a request builds one when it needs it. Without this module a built stream
stayed built until the process ended: more memory than a sleeping one, and two containers
for every full collection of the cyclic collector to scan (``collector.py``), for every
stream created or used since the start (the figures: bench/README.md, "Figures behind design
choices"). So every ``interval_s`` ``IdleStreams`` looks at the next ``batch`` of built
streams, for at most ``step_s`` of the loop (in turns: a step costs the same whatever the
number of streams), and puts to sleep each one that

- nobody has read or written for ``idle_ms`` (nor is it expired: that is ``Engine.find``'s
  to delete);
- has everything in Delta and visible: its messages flushed (``flushed_tail``), its tail and
  close durable (``visible_tail``, ``visible_closed``), no snapshot waiting to be flushed;
- no reader waits on (long-polls, SSE);
- holds nothing derived that its state does not carry: no forks of it, not a fork, not
  soft-deleted, no retention point or policy -- the streams recovery parses at start for the same
  reason (``storage.state_rows``);
- and nothing else refers to (``StreamIndex.sleep`` counts the references).

Streams created or used faster than ``idle_ms`` lets them sleep would keep a ``Stream`` each
(~1.3 KB) for that long: a million new streams, over a gigabyte. And every full collection
of the cyclic collector scans each built stream (``collector.py``): ~2-4 µs a stream with
its tail, so 65,536 built streams paused the loop 130-285 ms at a time. So the streams built
at once are capped (``most_built``): a share of the memory budget each
(``AWAKE_STREAM_BYTES``), and never more than ``MOST_BUILT`` (16,384: full collections of
41-58 ms measured with appends to random ones of 100,000 streams, each stream built holding
its one message, ``memory_tail``). While more are built, the idle
time shrinks to ``PRESSED_IDLE_MS`` and a step may take ``PRESSED_STEP_S``: streams unused
for a second sleep, each kept as ~130 bytes of columns (``cold_streams``), and the hot ones
stay built. Under load a built stream need not wait ``idle_ms`` either: one unused through
the last ``FULL_SCANS`` full collections (``full_collections``: they follow the load, none on
a quiet server) has cost the loop about what sleeping and being built again cost, and sleeps
then (never within ``PRESSED_IDLE_MS`` of its use). Only a stream whose every record is in
Delta with its state (``flushed_lsn``) sleeps, so the next flush does not build it again.

Its cached tail (flushed messages kept for reads) goes with it, into ``TailCaches.asleep``
(``asleep_tails``: tuples and an array, nothing for the collector to follow), from which
the next lookup that builds it again (one JSON parse, as for a dormant one) gives it back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal

from .asleep_tails import Kept
from .full_collections import FullCollections
from .periodic import Periodic
from .stream import Stream
from .stream_index import StreamIndex
from .tail_caches import TailCaches

log = logging.getLogger("durable_streams_server.engine")

IDLE_MS = 5 * 60 * 1000
"""How long a stream is left unused before it may sleep."""
AWAKE_STREAM_BYTES = 8192
"""The memory budget's share per built stream, for ``most_built`` (64 MiB: 8,192 streams)."""
MOST_BUILT = 16384
"""The most streams built at once, whatever the memory budget (the collector's pauses)."""
PRESSED_IDLE_MS = 1000
"""How long a stream is left unused before it may sleep while too many are built."""
PRESSED_STEP_S = 0.02
"""The longest step while too many are built (a fifth of the loop at the default interval)."""


def most_built(memory_budget_bytes: int) -> int:
    """The streams built at once before they sleep sooner: a share of the memory budget each
    (no share without a budget), at most ``MOST_BUILT``."""
    if not memory_budget_bytes:
        return MOST_BUILT
    return min(max(memory_budget_bytes // AWAKE_STREAM_BYTES, 1), MOST_BUILT)


class IdleStreams:
    def __init__(
        self,
        index: StreamIndex,
        tails: TailCaches,
        clock: Callable[[], int],
        idle_ms: int = IDLE_MS,
        interval_s: float = 0.1,
        batch: int = 1000,
        step_s: float = 0.002,
        *,
        flushed_lsn: Callable[[], int] = lambda: 2**63 - 1,
        most_built: int = 0,
    ) -> None:
        self.index = index
        self.tails = tails
        self.clock = clock
        self.idle_ms = idle_ms
        self.batch = batch
        self.step_s = step_s
        self.flushed_lsn = flushed_lsn
        self.most_built = most_built
        """Streams built at once before they sleep sooner (0: no cap)."""
        self.slept = 0
        """Streams put to sleep so far."""
        self.full_collections = FullCollections(clock)
        self._turn: list[int] = []
        self._periodic = Periodic("idle-streams", interval_s, self._step, log)

    def step(self) -> int:
        """Look at the next ``batch`` built streams; how many went to sleep."""
        if not self._turn:
            self._turn = self.index.built_uids()[::-1]  # (oldest last: popped first)
        pressed = 0 < self.most_built < self.index.awake
        idle_ms, step_s = self.idle_ms, self.step_s
        if pressed:  # (never longer to wait, nor a shorter step, than without the cap)
            idle_ms, step_s = min(idle_ms, PRESSED_IDLE_MS), max(step_s, PRESSED_STEP_S)
        now, flushed = self.clock(), self.flushed_lsn()
        used_after = now - idle_ms
        scanned_since = self.full_collections.oldest()
        if scanned_since is not None:  # (unused through ``FULL_SCANS`` full collections: ``full_collections``)
            used_after = max(used_after, min(scanned_since, now - PRESSED_IDLE_MS))
        until = time.perf_counter() + step_s
        slept = 0
        for _ in range(min(self.batch * (10 if pressed else 1), len(self._turn))):
            uid = self._turn.pop()
            kept = self._quiesce(self.index.built(uid), now, used_after, flushed)
            if kept is not False and self.index.sleep(uid):
                slept += 1
                if kept is not None:
                    self.tails.keep_asleep(uid, kept)
            if time.perf_counter() > until:
                break
        self.tails.asleep.settle()
        self.slept += slept
        return slept

    def _quiesce(self, stream: Stream | None, now: int, used_after: int, flushed: int) -> Kept | Literal[False] | None:
        """Whether ``stream`` may sleep (see the module docstring): among others, unused since
        ``used_after`` (ms). ``False``: it may not; else its cached tail, taken out of it for
        ``TailCaches.keep_asleep`` (``None``: it had none)."""
        if (
            stream is None
            or max(stream.last_access_ms, stream.last_write_ms) > used_after
            or stream.last_lsn > flushed
            or stream.waiters
            or stream.forks
            or stream.fork_of is not None  # (these three, ``StreamIndex.sleep`` refuses too, from the
            or stream.soft_deleted  # state's flags; looked at here first so their cached tails stay)
            or stream.snapshot_seq
            or stream.retention is not None
            or stream.snapshot_data is not None
            or not stream.visible_tail == stream.tail == stream.flushed_tail
            or stream.visible_closed != stream.closed
            or stream.expired(now)
        ):
            return False
        kept = self.tails.take(stream)
        return kept if not len(stream.mem) and not stream.batches else False

    def start(self) -> None:
        if self.idle_ms:
            self.full_collections.start()
            self._periodic.start()

    async def close(self) -> None:
        self.full_collections.close()
        await self._periodic.close()

    async def _step(self) -> None:
        self.step()
