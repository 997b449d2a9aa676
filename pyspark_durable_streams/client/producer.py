"""The idempotent producer (spec 5.2.1): batched, pipelined, retried, exactly-once appends.

``send()`` only queues a message and returns a future. A coordinator thread cuts the
queue into batches (at ``max_batch_bytes``, or after ``linger`` seconds), gives each batch
the next ``Producer-Seq`` and hands it to one of ``max_in_flight`` sender threads, which
deliver it with ``delivery.deliver``: every retry of a batch (connection errors, 5xx, 429
and 503 after Retry-After) repeats the same (id, epoch, seq), so the server stores it
exactly once.

Ordering: batches are dispatched in seq order (seq 0 of an epoch alone, because the server
rejects a later seq of an epoch it has not seen yet), but several connections may reorder
them on the way. The server then answers a later seq with ``409`` and
``Producer-Expected-Seq``; that batch waits until its predecessor is accepted and is sent
again. A gap the producer cannot explain (every predecessor was acknowledged before the
batch was sent) is fatal.
Futures resolve, and the acknowledged counters advance, strictly in seq order.

Fencing: ``403`` means a newer epoch owns this producer id. By default that is fatal
(``ProducerFenced``). With ``auto_claim=True`` the producer waits for its in-flight
requests, takes the server's epoch + 1 and sends every unacknowledged batch again from
seq 0. A batch that the old epoch did store but whose answer was lost is then stored
twice, so auto-claim trades exactly-once for availability (as the spec warns).

A producer restarted with the same id must use a higher epoch: the same epoch and
seq 0 would be taken for a retry and dropped as a duplicate (see ``ProducerStats``).

Batches: with ``bulk=True`` (the server takes bulk appends, ``client.bulk``; ``bulk=None``
asks it with one HEAD when the producer starts) a batch is one bulk append, and every
message is stored as its own message, byte streams' too. Otherwise (the default), JSON
streams: a batch is one JSON array, which the server flattens by one level; byte streams:
a batch is the messages concatenated and is stored as one message.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from . import errors
from ._http import USE_DEFAULT, Backoff, Timeout, UseDefault
from .appends import append_result
from .delivery import ProducerRequest, deliver
from .models import AppendResult
from .stream import Stream

_State = Literal["queued", "in_flight", "waiting", "done"]


@dataclass(frozen=True)
class ProducerStats:
    """What was acknowledged so far; ``last_offset`` is the tail after the newest acked batch."""

    epoch: int
    next_seq: int
    messages_sent: int
    messages_acked: int
    batches_acked: int
    duplicates: int
    retries: int
    last_offset: str | None


@dataclass(eq=False)
class _Batch:
    seq: int
    epoch: int
    body: bytes
    futures: list[Future[AppendResult]]
    state: _State = "queued"
    sent_as_front: bool = False  # every earlier batch was acknowledged when this one was sent
    result: AppendResult | None = None
    error: BaseException | None = field(default=None, repr=False)


class Producer:
    """Thread-safe idempotent producer for one stream; use as a context manager or ``close()``."""

    def __init__(
        self,
        stream: Stream,
        producer_id: str,
        *,
        epoch: int = 0,
        auto_claim: bool = False,
        linger: float = 0.005,
        max_batch_bytes: int = 1024 * 1024,
        max_in_flight: int = 4,
        max_buffer_bytes: int = 64 * 1024 * 1024,
        backoff: Backoff | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
        bulk: bool | None = False,
    ) -> None:
        if not producer_id:
            raise ValueError("producer_id must not be empty")
        for name, value, least in (("epoch", epoch, 0), ("max_batch_bytes", max_batch_bytes, 1)):
            if value < least:
                raise ValueError(f"{name} must be at least {least}, got {value}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.stream = stream
        self.producer_id = producer_id
        self.epoch = epoch
        self._json = stream.is_json
        self._content_type = stream.resolve_content_type()
        self._bulk = stream.supports_bulk() if bulk is None else bulk
        self._auto_claim = auto_claim
        self._linger = linger
        self._max_batch_bytes = max_batch_bytes
        self._max_in_flight = max_in_flight
        self._max_buffer_bytes = max_buffer_bytes
        self._backoff = backoff or Backoff()
        self._headers = dict(headers or {})
        self._timeout = timeout
        self._lock = threading.Condition()
        self._pending: deque[tuple[bytes, Future[AppendResult]]] = deque()
        self._pending_bytes = 0
        self._oldest = 0.0
        self._window: deque[_Batch] = deque()  # unacknowledged batches, in seq order
        self._next_seq = 0
        self._claim_epoch: int | None = None
        self._unresolved = 0
        self._flushing = 0
        self._closing = False
        self._failure: BaseException | None = None
        self._sent = self._acked = self._batches = self._duplicates = self._retries = 0
        self._last_offset: str | None = None
        self._close_result: AppendResult | None = None
        self._senders = ThreadPoolExecutor(max_in_flight, thread_name_prefix=f"producer-{producer_id}")
        self._coordinator = threading.Thread(target=self._run, name=f"producer-{producer_id}", daemon=True)
        self._coordinator.start()

    # -- public API ----------------------------------------------------------------------

    def send(self, data: bytes | str) -> Future[AppendResult]:
        """Queue one message (JSON streams: one JSON text); the future resolves when acked.

        Blocks while more than ``max_buffer_bytes`` wait to be sent (backpressure).
        """
        body = data.encode("utf-8") if isinstance(data, str) else data
        if not body and self._bulk:
            raise ValueError("a message must not be empty (the protocol stores no empty messages)")
        future: Future[AppendResult] = Future()
        with self._lock:
            while self._pending_bytes > self._max_buffer_bytes and self._accepting():
                self._lock.wait()
            if not self._accepting():
                raise errors.ProducerClosed(f"producer {self.producer_id!r} is closed") from self._failure
            if not self._pending:
                self._oldest = time.monotonic()
            self._pending.append((body, future))
            self._pending_bytes += len(body)
            self._unresolved += 1
            self._sent += 1
            self._lock.notify_all()
        return future

    def send_json(self, value: Any) -> Future[AppendResult]:
        """Queue one JSON value as one message (arrays included)."""
        if not self._json:
            raise TypeError(f"send_json needs an application/json stream, {self.stream.url} is {self._content_type}")
        return self.send(json.dumps(value, separators=(",", ":"), allow_nan=False).encode("utf-8"))

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged; raise what failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._flushing += 1
            self._lock.notify_all()
            try:
                while self._unresolved and self._failure is None:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise errors.DurableStreamsError(f"flush timed out with {self._unresolved} messages unacked")
                    self._lock.wait(remaining)
            finally:
                self._flushing -= 1
            if self._failure is not None:
                raise self._failure

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the threads. Raises the failure that stopped the producer, if any."""
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closing = True
                self._lock.notify_all()
            self._coordinator.join()
            self._senders.shutdown(wait=True)

    def close_stream(self, data: bytes | str | None = None, *, timeout: float | None = None) -> AppendResult:
        """Flush, then close the stream (EOF for readers) with this producer's headers, appending
        ``data`` as the final message if given, and close the producer.

        The close is one more request of the producer (the next seq), retried like any batch:
        a retried close the server already applied is answered as a duplicate, and closing
        again through this producer returns the first answer. A stream closed already by
        someone else (another producer, a plain close) raises ``StreamClosed`` (409
        ``STREAM_CLOSED``), with or without ``data``: this producer's close did not happen, and
        its caller must not take another writer's end of the stream for its own (the
        protocol's client suite, ``idempotent-producer-close-conflict``). ``duplicate`` is set
        only for a final message that an earlier attempt stored.
        """
        if self._close_result is not None and data is None:
            return self._close_result  # closed by this producer already
        try:
            self.flush(timeout)
            with self._lock:
                if not self._accepting():
                    raise errors.ProducerClosed(f"producer {self.producer_id!r} is closed") from self._failure
                self._closing = True
                seq, self._next_seq = self._next_seq, self._next_seq + 1
            self._close_result = self._send_close(data, seq)
            return self._close_result
        finally:
            self.close()

    def _send_close(self, data: bytes | str | None, seq: int) -> AppendResult:
        body = b"" if data is None else data.encode("utf-8") if isinstance(data, str) else data
        if body and self._json:
            body = b"[" + body + b"]"  # one message, as a batch of one
        request = ProducerRequest(self.stream.url, self._content_type, self.producer_id, self.epoch, seq, body)
        response = deliver(
            self.stream.transport,
            request,
            backoff=self._backoff,
            headers={**self._headers, "Stream-Closed": "true"},
            timeout=self._timeout,
            on_retry=self._count_retry,
        )
        result = append_result(response, producer=bool(body))  # a close-only answer is 204 either way
        with self._lock:
            self._last_offset = result.next_offset or self._last_offset
            self._batches += 1
        return result

    def stats(self) -> ProducerStats:
        with self._lock:
            return ProducerStats(
                epoch=self.epoch,
                next_seq=self._next_seq,
                messages_sent=self._sent,
                messages_acked=self._acked,
                batches_acked=self._batches,
                duplicates=self._duplicates,
                retries=self._retries,
                last_offset=self._last_offset,
            )

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- coordinator (owns the window; every state change happens under the lock) ---------

    def _accepting(self) -> bool:
        return not self._closing and self._failure is None

    def _run(self) -> None:
        with self._lock:
            while not (self._closing and not self._pending and not self._window) and self._failure is None:
                self._cut_batches()
                self._dispatch()
                self._lock.wait(self._wait_time())

    def _wait_time(self) -> float | None:
        if not self._pending or len(self._window) >= self._max_in_flight or self._claim_epoch is not None:
            return None
        return max(0.0, self._oldest + self._linger - time.monotonic())

    def _cut_batches(self) -> None:
        while self._pending and len(self._window) < self._max_in_flight and self._claim_epoch is None:
            lingered = time.monotonic() - self._oldest >= self._linger
            if not (lingered or self._flushing or self._closing or self._pending_bytes >= self._max_batch_bytes):
                return
            bodies: list[bytes] = []
            futures: list[Future[AppendResult]] = []
            size = 0
            while self._pending and (not bodies or size + len(self._pending[0][0]) <= self._max_batch_bytes):
                body, future = self._pending.popleft()
                bodies.append(body)
                futures.append(future)
                size += len(body)
            self._pending_bytes -= size
            self._oldest = time.monotonic()
            if self._bulk:
                from . import bulk

                payload = bulk.body(bodies)
            else:
                payload = b"[" + b",".join(bodies) + b"]" if self._json else b"".join(bodies)
            self._window.append(_Batch(self._next_seq, self.epoch, payload, futures))
            self._next_seq += 1
            self._lock.notify_all()  # wakes senders blocked on a full buffer

    def _dispatch(self) -> None:
        """Send queued batches, and a batch that hit a gap once its predecessor is acked."""
        if self._claim_epoch is not None:
            self._claim()
            return
        predecessor_done = True
        for batch in self._window:
            if batch.seq > 0 and self._window[0].seq == 0:
                break  # seq 0 establishes an epoch alone: a later seq arriving first would get 400
            if batch.state == "queued" or (batch.state == "waiting" and predecessor_done):
                batch.state = "in_flight"
                batch.sent_as_front = batch is self._window[0]
                self._senders.submit(self._send, batch)
            predecessor_done = batch.state == "done"

    def _claim(self) -> None:
        """Auto-claim after fencing: once nothing is in flight, resend the window under a new epoch."""
        if any(batch.state == "in_flight" for batch in self._window):
            return
        assert self._claim_epoch is not None
        self.epoch = self._claim_epoch
        self._claim_epoch = None
        for seq, batch in enumerate(self._window):
            batch.seq, batch.epoch, batch.state = seq, self.epoch, "queued"
        self._next_seq = len(self._window)
        self._dispatch()

    def _completed(self, batch: _Batch, outcome: AppendResult | BaseException) -> None:
        with self._lock:
            if isinstance(outcome, AppendResult):
                batch.state, batch.result = "done", outcome
                self._acknowledge()
            elif isinstance(outcome, errors.SequenceGap) and not batch.sent_as_front:
                batch.state = "waiting"  # overtook its predecessor on another connection: resend after it
            elif isinstance(outcome, errors.ProducerFenced) and self._auto_claim and batch.epoch == self.epoch:
                batch.state = "waiting"
                self._claim_epoch = max(self._claim_epoch or 0, (outcome.current_epoch or self.epoch) + 1)
            else:
                self._fail(outcome)
            self._lock.notify_all()

    def _acknowledge(self) -> None:
        while self._window and self._window[0].state == "done":
            batch = self._window.popleft()
            assert batch.result is not None
            self._batches += 1
            self._acked += len(batch.futures)
            self._unresolved -= len(batch.futures)
            self._duplicates += batch.result.duplicate
            self._last_offset = batch.result.next_offset or self._last_offset
            for future in batch.futures:
                future.set_result(batch.result)

    def _fail(self, error: BaseException) -> None:
        self._failure = error
        for batch in self._window:
            for future in batch.futures:
                future.set_exception(error)
        for _, future in self._pending:
            future.set_exception(error)
        self._window.clear()
        self._pending.clear()
        self._pending_bytes = self._unresolved = 0

    # -- senders (one request each; retries keep the same id, epoch and seq) ---------------

    def _send(self, batch: _Batch) -> None:
        request = ProducerRequest(
            self.stream.url, self._content_type, self.producer_id, batch.epoch, batch.seq, batch.body, self._bulk
        )
        try:
            response = deliver(
                self.stream.transport,
                request,
                backoff=self._backoff,
                headers=self._headers,
                timeout=self._timeout,
                on_retry=self._count_retry,
            )
        except BaseException as exc:  # reported to the coordinator, which fails or recovers
            self._completed(batch, exc)
            return
        self._completed(batch, append_result(response, producer=True))

    def _count_retry(self) -> None:
        with self._lock:
            self._retries += 1
