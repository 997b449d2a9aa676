"""The source's view of its streams on the driver: keys, URLs, tails and incarnations (cached),
server capabilities, and the planning of a batch into partitions. Never pickled to executors."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from .._connect import connect
from ..client import Bucket, Client, Gone, NotFound, ReadFraming, Stream, TransportError
from ..options import OptionError, ReadOptions
from .direct_plans import DirectRange, PlansUnavailable, plan_stream
from .offsets import EARLIEST, SEQ_OFFSET, is_seq_offset, pending_messages, sorted_offsets, split_range
from .range_offsets import end_offset, start_offset
from .task_reader import StreamRange
from .time_offsets import offset_at

log = logging.getLogger("pyspark_durable_streams.source")


class DriverStreams:
    """The driver's view of the streams read: keys, URLs, tails (cached) and capabilities."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.client: Client = connect(options.connection, options.server or options.urls[0])
        self.bucket: Bucket | None = None
        if options.bucket is not None:
            self.bucket = self.client.bucket(options.bucket)
        self._tails: dict[str, str] = {}
        self._tails_at = -math.inf
        self.incarnations: dict[str, str] = {}
        self.flushed: dict[str, str] = {}
        """Where each stream's messages not yet in Delta start, as its last HEAD said (our server's
        ``Stream-Flushed-Offset``): no read plan is asked for a range from there on (``_direct``)."""
        self.missing: dict[str, NotFound] = {}
        self._framings: dict[str, ReadFraming] = {}
        self.snapshots: dict[str, str] = {}
        """``startingOffsets=snapshot``: the streams that start at a snapshot, and its offset."""

    def url(self, key: str) -> str:
        return self.bucket.stream(key).url if self.bucket is not None else key

    def stream(self, key: str) -> Stream:
        return self.client.stream(self.url(key))

    def tails(self, max_age_s: float = 0.0) -> dict[str, str]:
        """Each stream's next offset, at most ``max_age_s`` old (HEAD, or one bucket listing).

        ``incarnations`` holds what the server said of each one's incarnation alongside; a
        named stream that answers 404 is left out and its error kept in ``missing``."""
        now = time.monotonic()
        if now - self._tails_at >= max_age_s:
            tails, self.incarnations, self.flushed, self.missing = {}, {}, {}, {}
            if self.bucket is None:
                for url in self.options.urls:
                    try:
                        meta = self.client.stream(url).metadata()
                    except NotFound as exc:
                        self.missing[url] = exc
                        continue
                    tails[url] = meta.next_offset
                    if meta.incarnation is not None:
                        self.incarnations[url] = meta.incarnation
                    if meta.flushed_offset is not None:
                        self.flushed[url] = meta.flushed_offset
            else:
                for info in self.bucket.streams(prefix=self.options.prefix or None):
                    if info.status == "Deleted":
                        continue
                    tail, incarnation = info.raw.get("next_offset"), info.raw.get("incarnation")
                    if not tail:
                        meta = self.stream(info.stream_id).metadata()
                        tail, incarnation = meta.next_offset, meta.incarnation
                    tails[info.stream_id] = str(tail)
                    if incarnation:
                        self.incarnations[info.stream_id] = str(incarnation)
            self._tails = tails
            self._tails_at = time.monotonic()
        return dict(self._tails)

    def require(self) -> dict[str, str]:
        """``tails()``, failing as a HEAD does for a named stream that does not exist."""
        tails = self.tails()
        for error in self.missing.values():
            raise error
        return tails

    def cached_tails(self) -> dict[str, str] | None:
        return dict(self._tails) if self._tails_at > -math.inf else None

    def framing(self, key: str) -> ReadFraming:
        """Our server: sequence offsets, and reads that answer Arrow (or multipart) when asked
        (probed once per server, at the stream's tail)."""
        origin = _origin(self.url(key))
        if origin not in self._framings:
            tail = self._tails.get(key) or self.stream(key).metadata().next_offset  # the tails' HEAD, if any
            framing: ReadFraming = "plain"
            if SEQ_OFFSET.match(tail) is not None:
                framing = self.stream(key).read_framing(tail)
            self._framings[origin] = framing
        return self._framings[origin]

    def boundaries(self, key: str) -> bool:
        """Every message arrives with its own offset (so ranges can be counted and split)."""
        return self.framing(key) != "plain"

    def starting_offsets(self, tails: Mapping[str, str]) -> dict[str, str]:
        """Where a new query starts: each stream's offset under the read's start kind."""
        start = {}
        for key, tail in tails.items():
            start[key], at_snapshot = start_offset(self.options.start, key, tail, self.stream(key))
            if at_snapshot:
                self.snapshots[key] = start[key]
        return sorted_offsets(start)

    def ending_offsets(self, tails: Mapping[str, str]) -> dict[str, str]:
        """Where a batch read ends: each stream's offset under the read's end kind (default: the tails)."""
        return {key: end_offset(self.options.end, key, tail, self.stream(key)) for key, tail in tails.items()}

    def offset_at(self, key: str, at_ms: int) -> str | None:
        """For filter pushdown: the first offset appended at or after ``at_ms`` (the tail if none
        was); ``None`` where the server has no time lookups (then nothing is cut: Spark filters)."""
        try:
            return offset_at(self.stream(key), key, "filterPushdown", at_ms, strategy="latest")
        except OptionError:
            return None

    def plan(self, start: Mapping[str, str], end: Mapping[str, str]) -> list[StreamRange | DirectRange]:
        """Partitions of ``[start, end)``: history from the Delta files where the server plans
        reads (``direct_plans``), the rest over HTTP split by sequence number. Each partition is
        a function of its offsets: a re-planned batch reads the same rows."""
        ranges: list[tuple[str, str, str, ReadFraming]] = []
        direct: list[DirectRange] = []
        spans = {key: (start.get(key, EARLIEST), end[key]) for key in sorted(end)}
        counts = {key: pending_messages(s, e) for key, (s, e) in spans.items() if is_seq_offset(s) and is_seq_offset(e)}
        total = max(1, sum(counts.values()))
        for key, (first, last) in spans.items():
            if last > first:
                planned, first = self._direct(key, first, last, self._per_partition(counts.get(key, 0), total))
                direct += planned
            if last > first:
                ranges.append((key, first, last, self.framing(key)))
        http = self._http_partitions(ranges)
        if direct:
            log.info(
                "durable_streams: batch planned: %d messages from Delta files (%d partitions), %d ranges over HTTP",
                sum(part.end - part.first for part in direct),
                len(direct),
                len(http),
            )
        return [*direct, *http]

    def _pieces(self, count: int, total: int) -> int:
        """How many partitions ``count`` of a batch's ``total`` pending messages get: one per
        ``messagesPerPartition``, and at least their share of ``minPartitions``."""
        pieces = math.ceil(count / self.options.messages_per_partition)
        if self.options.min_partitions:
            pieces = max(pieces, math.ceil(self.options.min_partitions * count / total))
        return max(1, pieces)

    def _per_partition(self, count: int, total: int) -> int:
        """Messages per direct partition for ``count`` of the batch's ``total``: at most
        ``messagesPerPartition``, and few enough that their share of ``minPartitions`` is met
        (row groups of the stream alone are never split: they may keep it from being met)."""
        per = self.options.messages_per_partition
        if self.options.min_partitions and count:
            per = min(per, max(1, count // self._pieces(count, total)))
        return per

    def _direct(self, key: str, first: str, last: str, per_partition: int) -> tuple[list[DirectRange], str]:
        """Direct partitions of the start of ``[first, last)`` (about ``per_partition`` messages
        each) and where HTTP takes over."""
        mode = self.options.history_reads
        if mode == "http":
            return [], first
        flushed = self.flushed.get(key)
        if mode == "auto" and flushed is not None and is_seq_offset(first) and first >= flushed:
            return [], first  # (none of it was in Delta at the tails' HEAD: a live batch, read over HTTP)
        try:
            planned = plan_stream(self.client, key, self.url(key), first, last, per_partition)
            self._framings.setdefault(_origin(self.url(key)), "arrow")  # (a server that plans reads is ours)
            return planned
        except (Gone, NotFound):
            return [], first  # below retention, or deleted: the HTTP read applies failOnDataLoss as always
        except (PlansUnavailable, TransportError) as exc:
            if mode == "delta":
                raise RuntimeError(
                    f"durable_streams: option 'historyReads' is 'delta' but stream {key} cannot be read from "
                    f"Delta: {exc}. Use historyReads=auto (Delta where possible, HTTP elsewhere) or http."
                ) from exc
            return [], first

    def _http_partitions(self, ranges: list[tuple[str, str, str, ReadFraming]]) -> list[StreamRange]:
        counts = {
            key: pending_messages(s, e)
            for key, s, e, framing in ranges
            if framing != "plain" and is_seq_offset(s) and is_seq_offset(e)
        }
        total = max(1, sum(counts.values()))
        partitions = []
        for key, first, last, framing in ranges:
            cuts = split_range(first, last, self._pieces(counts[key], total)) if key in counts else [(first, last)]
            partitions += [StreamRange(key, self.url(key), s, e, framing) for s, e in cuts]
        return partitions

    def read_forward(
        self, key: str, start: str, tail: str, max_rows: int | None, max_bytes: int | None
    ) -> tuple[str, int, int]:
        """The furthest boundary after ``start`` (at most ``tail``) within the budgets; at least
        one step so the query progresses. Returns it with the rows and bytes it admits."""
        best, rows, size, best_rows, best_size = start, 0, 0, 0, 0
        try:
            with self.stream(key).read(start, boundaries=self.boundaries(key)) as reader:
                for message in reader:
                    if message.offset is not None and message.offset >= tail:
                        break
                    rows, size = rows + 1, size + len(message.data)
                    over = (max_rows is not None and rows > max_rows) or (max_bytes is not None and size > max_bytes)
                    if over and best > start:
                        break
                    if message.next_offset is not None:
                        if message.next_offset > tail:
                            break
                        best, best_rows, best_size = message.next_offset, rows, size
                        if best == tail or over:
                            break
        except Gone:
            return tail, 0, 0  # the task meets the 410 and applies failOnDataLoss
        return (best if best > start else tail), best_rows, best_size


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
