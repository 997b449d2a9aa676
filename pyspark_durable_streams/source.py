"""The ``durable_streams`` source: batch (``spark.read``) and micro-batch (``spark.readStream``).

Rows: one per message, columns ``stream`` (the stream URL, or for a bucket subscription the
bucket-local stream id), ``offset`` (the message's own offset; null where the server does
not expose message boundaries), ``value`` (binary, or string for text/JSON streams or with
``valueType``), ``content_type`` and ``timestamp`` (the append time from the part's
``Stream-Timestamp``; null where the server does not send it). A user schema given with
``.schema(...)`` may add columns: each is parsed from the top-level field of the same name
of the JSON message (null where missing or of another type).

Spark offsets are ``{stream key: next protocol offset}``. The driver plans; tasks read (see
``_task_reader``). On our server (sequence offsets + the Arrow or multipart read extension) a
large range of a stream is split by message sequence into several partitions, and
``maxMessagesPerTrigger`` is applied by offset arithmetic without reading. Elsewhere (e.g.
the reference Node server) each stream is one partition per batch, and the limits are
applied by reading forward on the driver to a response boundary; since such a server
answers a read with everything up to its tail, a batch there may exceed the limit (at least
one response is always admitted so the query progresses). ``maxBytesPerTrigger`` always
reads forward on the driver.

``410 Gone`` (a snapshot dropped history the query still needs): with ``failOnDataLoss``
true the task fails naming the stream and offset; with false the stream continues from its
``/bootstrap``: the snapshot is not emitted, messages before it are skipped (and logged),
the retained messages after it are emitted. ``startingOffsets=earliest`` on a stream with a
snapshot starts at the bootstrap without counting as data loss.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType, TimestampType

from ._offsets import (
    EARLIEST,
    SEQ_OFFSET,
    allocate_rows,
    is_seq_offset,
    pending_messages,
    seq_of,
    seq_offset,
    sorted_offsets,
    split_range,
    starts_inside,
)
from ._task_reader import DataLossError, Framing, StreamRange, make_client, read_range
from .client import Bucket, Client, Gone, Stream, TransportError
from .client.arrow import ARROW_STREAM
from .client.models import is_json, media_type
from .options import LATEST, ReadOptions

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
else:
    try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow
        from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
    except ImportError:  # pragma: no cover - pyspark 4.0 / 4.1
        ReadLimit = Any

        class SupportsTriggerAvailableNow:
            pass


__all__ = ["DataLossError", "DurableStreamsReader", "DurableStreamsStreamReader", "infer_schema"]

log = logging.getLogger("pyspark_durable_streams.source")
_EMPTY_STREAM = seq_offset(0)
CONTENT_TYPE_METADATA = "durable_streams.content_type"
"""Metadata of the ``value`` column: the content type of every stream read, when they share one."""
_PROBE_ACCEPT = f"{ARROW_STREAM}, multipart/mixed;q=0.5"
_FRAMINGS: dict[str, Framing] = {ARROW_STREAM: "arrow", "multipart/mixed": "multipart"}


def infer_schema(options: ReadOptions) -> StructType:
    """The default schema; ``value`` is a string when every named stream is text or JSON."""
    value_type: BinaryType | StringType = BinaryType()
    value_metadata: dict[str, str] = {}
    if options.value_type in ("string", "json"):
        value_type = StringType()
    elif options.value_type is None and options.urls:
        types = _content_types(options)
        if all(is_json(t) or media_type(t).startswith("text/") for t in types):
            value_type = StringType()
        if len({media_type(t) for t in types}) == 1:  # the sink creates streams of this type by default
            value_metadata[CONTENT_TYPE_METADATA] = types[0]
    return StructType(
        [
            StructField("stream", StringType(), False),
            StructField("offset", StringType(), True),
            StructField("value", value_type, True, value_metadata),
            StructField("content_type", StringType(), True),
            StructField("timestamp", TimestampType(), True),
        ]
    )


def _content_types(options: ReadOptions) -> list[str]:
    with make_client(options.connection) as client:
        types = []
        for url in options.urls:
            try:
                types.append(client.stream(url).metadata().content_type)
            except TransportError as exc:
                raise RuntimeError(
                    f"durable_streams: cannot reach the Durable Streams server at {url} ({exc}): is it running?"
                ) from exc
            except Exception as exc:
                raise RuntimeError(
                    f"durable_streams: cannot HEAD {url} to choose the value column's type ({exc}); "
                    f"create the stream first or set option valueType=binary|string"
                ) from exc
    return types


class _Streams:
    """The driver's view of the streams read: keys, URLs, tails (cached) and capabilities."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.client: Client = make_client(options.connection, options.server)
        self.bucket: Bucket | None = None
        if options.bucket is not None:
            self.bucket = self.client.bucket(options.bucket)
        self._tails: dict[str, str] = {}
        self._tails_at = -math.inf
        self._framings: dict[str, Framing] = {}

    def url(self, key: str) -> str:
        return self.bucket.stream(key).url if self.bucket is not None else key

    def stream(self, key: str) -> Stream:
        return self.client.stream(self.url(key))

    def tails(self, max_age_s: float = 0.0) -> dict[str, str]:
        """Each stream's next offset, at most ``max_age_s`` old (HEAD, or one bucket listing)."""
        now = time.monotonic()
        if now - self._tails_at >= max_age_s:
            if self.bucket is None:
                self._tails = {url: self.client.stream(url).metadata().next_offset for url in self.options.urls}
            else:
                tails = {}
                for info in self.bucket.streams(prefix=self.options.prefix or None):
                    if info.status == "Deleted":
                        continue
                    tail = info.raw.get("next_offset")
                    tails[info.stream_id] = str(tail) if tail else self.stream(info.stream_id).metadata().next_offset
                self._tails = tails
            self._tails_at = time.monotonic()
        return dict(self._tails)

    def cached_tails(self) -> dict[str, str] | None:
        return dict(self._tails) if self._tails_at > -math.inf else None

    def framing(self, key: str) -> Framing:
        """Our server: sequence offsets, and reads that answer Arrow (or multipart) when asked."""
        url = self.url(key)
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in self._framings:
            tail = self.stream(key).metadata().next_offset
            framing: Framing = "plain"
            if SEQ_OFFSET.match(tail) is not None:
                response = self.client.transport.request(
                    "GET", url, ok=(200, 204), params={"offset": tail}, headers={"Accept": _PROBE_ACCEPT}, stream=True
                )
                with response:
                    framing = _FRAMINGS.get(media_type(response.headers.get("Content-Type")), "plain")
            self._framings[origin] = framing
        return self._framings[origin]

    def boundaries(self, key: str) -> bool:
        """Every message arrives with its own offset (so ranges can be counted and split)."""
        return self.framing(key) != "plain"

    def starting_offsets(self, tails: Mapping[str, str]) -> dict[str, str]:
        options = self.options
        chosen = dict(options.starting_json)
        start = {}
        for key, tail in tails.items():
            word = options.starting if options.starting != "json" else chosen.get(key, EARLIEST)
            offset = {"earliest": EARLIEST, "latest": tail, LATEST: tail}.get(word, word)
            start[key] = offset
        return sorted_offsets(start)

    def plan(self, start: Mapping[str, str], end: Mapping[str, str]) -> list[StreamRange]:
        """Partitions of ``[start, end)``: a pure function of the two offsets (and the server kind)."""
        ranges: list[tuple[str, str, str, Framing]] = []
        for key in sorted(end):
            first, last = start.get(key, EARLIEST), end[key]
            if last > first:
                ranges.append((key, first, last, self.framing(key)))
        counts = {
            key: pending_messages(s, e)
            for key, s, e, framing in ranges
            if framing != "plain" and is_seq_offset(s) and is_seq_offset(e)
        }
        total = max(1, sum(counts.values()))
        partitions = []
        for key, first, last, framing in ranges:
            if key in counts:
                pieces = math.ceil(counts[key] / self.options.messages_per_partition)
                if self.options.min_partitions:
                    pieces = max(pieces, math.ceil(self.options.min_partitions * counts[key] / total))
                cuts = split_range(first, last, pieces)
            else:
                cuts = [(first, last)]
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


class _Reader:
    """Shared by both readers: options, schema, and driver state that is never pickled."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._driver: _Streams | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_driver"] = None  # sessions and caches stay on the driver
        return state

    @property
    def streams(self) -> _Streams:
        if self._driver is None:
            self._driver = _Streams(self._options)
        return self._driver

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StreamRange)
        return read_range(self._options, self._schema, partition)


class DurableStreamsReader(_Reader, DataSourceReader):
    """``spark.read``: from ``startingOffsets`` to ``endingOffsets`` (default: the tails now)."""

    def partitions(self) -> Sequence[InputPartition]:
        streams = self.streams
        tails = streams.tails()
        start = streams.starting_offsets(tails)
        end = dict(tails)
        if self._options.ending == "json":
            for key, offset in self._options.ending_json:
                if key in end:
                    end[key] = tails[key] if offset == LATEST else offset
        planned = streams.plan(start, end)
        return planned or [StreamRange("", "", EARLIEST, EARLIEST, "plain")]


class DurableStreamsStreamReader(_Reader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches with admission control and ``Trigger.AvailableNow``."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self._target: dict[str, str] | None = None
        self._last: dict[str, str] | None = None
        self._turn = 0
        self._idle = False

    def initialOffset(self) -> dict[str, str]:
        return self.streams.starting_offsets(self.streams.tails())

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.streams.tails()

    def getDefaultReadLimit(self) -> ReadLimit:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

        if self._options.max_messages_per_trigger is not None:
            return ReadMaxRows(self._options.max_messages_per_trigger)
        if self._options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self._options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, str] | None:
        tails = self.streams.cached_tails()
        return sorted_offsets(tails) if tails else None

    def latestOffset(self, start: dict[str, str] | None = None, limit: ReadLimit | None = None) -> dict[str, str]:
        """The end of the next batch. After a batch with data the tails are looked up afresh (the
        stream is live: more is likely there already); while idle they are cached for
        ``pollIntervalMs``, since Spark asks every few milliseconds then."""
        if start is None:  # pyspark < 4.2 calls latestOffset() without arguments
            start = self._last if self._last is not None else self.initialOffset()
        tails = self.streams.tails(self._options.poll_interval_ms / 1000 if self._idle else 0.0)
        if self._target is not None:
            tails = {key: min(tail, self._target[key]) for key, tail in tails.items() if key in self._target}
        end = dict(start)
        for key, tail in tails.items():
            if key not in start and tail == _EMPTY_STREAM:
                continue  # a new, still empty stream of a subscription: nothing to read yet
            end[key] = max(start.get(key, EARLIEST), tail)
        end = self._admit(start, end, limit)
        self._idle = end == start
        self._last = sorted_offsets(end)
        return self._last

    def _admit(self, start: Mapping[str, str], end: dict[str, str], limit: ReadLimit | None) -> dict[str, str]:
        max_rows, max_bytes = _limits(limit, self._options)
        keys = [key for key in sorted(end) if end[key] > start.get(key, EARLIEST)]
        if not keys or (max_rows is None and max_bytes is None):
            return end
        streams = self.streams
        countable = all(
            streams.boundaries(k) and is_seq_offset(start.get(k, EARLIEST)) and SEQ_OFFSET.match(end[k]) for k in keys
        )
        if countable and max_bytes is None and max_rows is not None:
            lags = {k: pending_messages(start.get(k, EARLIEST), end[k]) for k in keys}
            taken = allocate_rows(lags, max_rows)
            for k in keys:
                if taken[k] < lags[k]:
                    first = start.get(k, EARLIEST)
                    end[k] = seq_offset(seq_of(first) + starts_inside(first) + taken[k]) if taken[k] else first
            return end
        # Read forward on the driver, sharing the budgets; the first stream turns round-robin.
        self._turn = (self._turn + 1) % len(keys)
        rows_left, bytes_left = max_rows, max_bytes
        for k in keys[self._turn :] + keys[: self._turn]:
            first = start.get(k, EARLIEST)
            if rows_left == 0 or bytes_left == 0:
                end[k] = first
                continue
            end[k], rows, size = streams.read_forward(k, first, end[k], rows_left, bytes_left)
            rows_left = None if rows_left is None else max(0, rows_left - rows)
            bytes_left = None if bytes_left is None else max(0, bytes_left - size)
        return end

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        return self.streams.plan(start, end)

    def commit(self, end: dict[str, str]) -> None:
        """Nothing to do: the server keeps no consumer state (and AvailableNow skips the last commit)."""

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.client.close()


def _limits(limit: ReadLimit | None, options: ReadOptions) -> tuple[int | None, int | None]:
    name = type(limit).__name__
    if name == "ReadMaxRows":
        return int(getattr(limit, "max_rows")), options.max_bytes_per_trigger  # noqa: B009
    if name == "ReadMaxBytes":
        return None, int(getattr(limit, "max_bytes"))  # noqa: B009
    return None, None
