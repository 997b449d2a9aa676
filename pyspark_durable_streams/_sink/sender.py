"""The idempotent appends of one write task: fixed (Producer-Id, Epoch, Seq) triples, pipelined.

Why not the client's ``Producer``: it cuts batches by time (``linger``) and by how fast the
server answers, so two attempts of a task would number different bodies with the same seq.
Here the bodies come from ``RequestCutter`` (a pure function of the rows) and this module only
numbers and sends them:

* seq 0 of every (stream, epoch) is sent alone and acknowledged first: a new epoch must start
  at seq 0 (spec 5.2.1, ``400`` otherwise), so nothing may overtake it;
* later requests go out with up to ``max_in_flight`` in flight per task; one that overtakes its
  predecessor on another connection gets ``409`` + ``Producer-Expected-Seq`` and is re-sent
  once the predecessor lands;
* connection errors, timeouts, ``5xx`` and ``429`` (after their ``Retry-After``) are re-sent with
  the same triple until ``delivery_timeout_s``: the server stores each seq at most once (the
  request and its retries are the client's ``Client.deliver``, the loop ``Producer`` uses too);
* ``200`` (stored) and ``204`` (already stored: a retry or a re-run) both count as delivered;
* ``403`` (fenced) and ``409`` + ``Stream-Closed`` fail the task with a message saying what to do.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from ..client import Backoff, Client, ProducerRequest, errors
from ..client.delivery import TRANSIENT

_RETRIED: tuple[type[errors.DurableStreamsError], ...] = (*TRANSIENT, errors.SequenceGap)
"""A gap this task cannot explain (its predecessor was delivered) is backed off and re-sent too."""


class SinkError(RuntimeError):
    """The sink cannot deliver: the message says what happened and what to do."""


@dataclass
class SendStats:
    requests: int = 0
    accepted: int = 0
    duplicates: int = 0
    retries: int = 0
    bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass(frozen=True)
class FailureHook:
    """Test hook: the task's process exits (as if killed) after ``after_requests`` deliveries."""

    after_requests: int


class TaskSender:
    """All the appends of one task (one partition of one batch), to one or more streams."""

    def __init__(
        self,
        client: Client,
        *,
        producer_id: str,
        epoch: int,
        max_in_flight: int,
        delivery_timeout_s: float,
        hook: FailureHook | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.client = client
        self._backoff = backoff or Backoff(initial_s=0.05, max_s=2.0, deadline_s=delivery_timeout_s)
        """Paces the retries of each request; its deadline is ``delivery_timeout_s`` (tests pass
        one with a fake clock and sleep)."""
        self.producer_id = producer_id
        self.epoch = epoch
        self.delivery_timeout_s = delivery_timeout_s
        self.hook = hook
        self.stats = SendStats()
        self._slots = threading.Semaphore(max_in_flight)
        self._pool = ThreadPoolExecutor(max_in_flight, thread_name_prefix="durable-streams-sink")
        self._futures: list[Future[None]] = []
        self._next_seq: dict[str, int] = {}
        self._acked = threading.Condition()
        self._watermark: dict[str, int] = {}  # per stream: every seq up to here is delivered
        self._early: dict[str, set[int]] = {}  # delivered seqs above the watermark

    def send(self, url: str, content_type: str, body: bytes, *, bulk: bool = False) -> None:
        """Queue the next request of ``url`` (``bulk``: a bulk append of messages of
        ``content_type``); blocks while ``max_in_flight`` are outstanding."""
        self._raise_failures()
        seq = self._next_seq.get(url, 0)
        self._next_seq[url] = seq + 1
        if seq == 0:
            self._deliver(url, content_type, seq, body, bulk)
            return
        self._slots.acquire()
        future = self._pool.submit(self._deliver, url, content_type, seq, body, bulk)
        future.add_done_callback(lambda _: self._slots.release())
        self._futures.append(future)

    def finish(self) -> None:
        """Wait for every request; raise the first failure."""
        try:
            for future in self._futures:
                future.result()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def abandon(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _raise_failures(self) -> None:
        done = [future for future in self._futures if future.done()]
        for future in done:
            future.result()
        if done:
            self._futures = [future for future in self._futures if not future.done()]

    def _deliver(self, url: str, content_type: str, seq: int, body: bytes, bulk: bool) -> None:
        request = ProducerRequest(url, content_type, self.producer_id, self.epoch, seq, body, bulk)

        def resend_now(exc: errors.DurableStreamsError) -> bool:
            # It overtook its predecessor on another connection, and that one has landed now.
            return isinstance(exc, errors.SequenceGap) and self._wait_for_predecessor(url, seq)

        try:
            result = self.client.deliver(
                request,
                backoff=self._backoff,
                retry_also=_RETRIED,
                resend_now=resend_now,
                on_retry=self._count_retry,
            )
        except errors.ProducerFenced as exc:
            raise SinkError(self._fenced_message(url, exc)) from exc
        except errors.StreamClosed as exc:
            raise SinkError(
                f"the target stream {url} is closed (final offset {exc.final_offset}): it accepts no more "
                "appends. Write to another stream, or delete and re-create this one; the query cannot "
                "continue while it targets a closed stream"
            ) from exc
        except _RETRIED as exc:  # raised only once the deadline is spent
            raise SinkError(
                f"gave up appending to {url} (Producer-Id {self.producer_id}, epoch {self.epoch}, seq {seq}) "
                f"after {self.delivery_timeout_s:g}s (option 'deliveryTimeoutMs'): {exc}"
            ) from exc
        self._delivered(url, seq, result.duplicate, len(body))

    def _count_retry(self) -> None:
        with self.stats.lock:
            self.stats.retries += 1

    def _wait_for_predecessor(self, url: str, seq: int) -> bool:
        """Wait until seq - 1 of ``url`` is delivered; False if it already was (a real gap: back off)."""
        with self._acked:
            if self._watermark.get(url, -1) >= seq - 1:
                return False
            return self._acked.wait_for(lambda: self._watermark.get(url, -1) >= seq - 1, self.delivery_timeout_s)

    def _delivered(self, url: str, seq: int, duplicate: bool, size: int) -> None:
        with self._acked:
            early = self._early.setdefault(url, set())
            early.add(seq)
            mark = self._watermark.get(url, -1)
            while mark + 1 in early:
                mark += 1
                early.discard(mark)
            self._watermark[url] = mark
            self._acked.notify_all()
        with self.stats.lock:
            self.stats.requests += 1
            self.stats.duplicates += duplicate
            self.stats.accepted += not duplicate
            self.stats.bytes += size
            delivered = self.stats.requests
        if self.hook is not None and delivered == self.hook.after_requests:  # one thread, once
            print(
                f"durable_streams sink test hook: exiting the task's process after {delivered} requests "
                f"(Producer-Id {self.producer_id}, epoch {self.epoch})",
                file=sys.stderr,
                flush=True,
            )
            os._exit(137)

    def _fenced_message(self, url: str, exc: errors.ProducerFenced) -> str:
        return (
            f"the server fenced Producer-Id {self.producer_id} on {url}: it has seen epoch {exc.current_epoch}, "
            f"newer than this task's epoch {self.epoch}. For a streaming query the epoch is the batch id, so "
            "another run of this query (or this query restarted from an older copy of its checkpoint) has "
            "already written later batches. Stop the other run, or start the query from a new checkpoint; "
            "for batch writes pick a new 'producerId' or a higher 'producerEpoch'"
        )
