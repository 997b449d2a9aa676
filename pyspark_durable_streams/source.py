"""The ``durable_streams`` source: batch (``spark.read``) and micro-batch (``spark.readStream``).

Rows: one per message, columns ``stream`` (the stream URL, or for a bucket subscription the
bucket-local stream id), ``offset`` (the message's own offset; null where the server does
not expose message boundaries), ``value`` (binary, or string for text/JSON streams or with
``valueType``), ``content_type`` and ``timestamp`` (the append time from the part's
``Stream-Timestamp``; null where the server does not send it). A user schema given with
``.schema(...)`` may add columns: each is parsed from the top-level field of the same name
of the JSON message (null where missing or of another type).

Spark offsets are ``{stream key: next protocol offset}``. The driver plans; tasks read (see
``_source.task_reader``). On our server (sequence offsets + the Arrow or multipart read extension) a
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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType, TimestampType

from ._connect import connect
from ._source.consumer_progress import record_progress
from ._source.deletions import judge
from ._source.direct_plans import DirectRange
from ._source.direct_reads import read_direct
from ._source.driver_streams import DriverStreams
from ._source.first_batch import batch_start, with_first_start
from ._source.incarnations import (
    SparkOffset,
    decode,
    deleted_message,
    encode,
    new_incarnation,
    range_start,
    recreated_message,
)
from ._source.offsets import (
    EARLIEST,
    SEQ_OFFSET,
    allocate_rows,
    is_seq_offset,
    pending_messages,
    seq_of,
    seq_offset,
    starts_inside,
)
from ._source.pacing import Pacing
from ._source.pushdown import Bounds, narrowed
from ._source.schema_record import SCHEMA_KEY, check_schema, schema_record
from ._source.snapshot_start import SnapshotRow, marked, read_snapshot, snapshot_rows
from ._source.task_reader import DataLossError, StreamRange, read_range
from ._worker_gc import freeze_worker_imports
from .client import TransportError
from .client.models import is_json, media_type
from .options import OptionError, ReadOptions

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter  # (pyspark >= 4.1)
    from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
else:
    try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow
        from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
    except ImportError:  # pragma: no cover - pyspark 4.0 / 4.1
        ReadLimit = Any

        class SupportsTriggerAvailableNow:
            pass


__all__ = [
    "DataLossError",
    "DurableStreamsPushdownReader",
    "DurableStreamsReader",
    "DurableStreamsStreamReader",
    "infer_schema",
]

log = logging.getLogger("pyspark_durable_streams.source")
_EMPTY_STREAM = seq_offset(0)
CONTENT_TYPE_METADATA = "durable_streams.content_type"
"""Metadata of the ``value`` column: the content type of every stream read, when they share one."""


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
    with connect(options.connection, options.urls[0]) as client:
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


class _Reader:
    """Shared by both readers: options, schema, and driver state that is never pickled."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._driver: DriverStreams | None = None
        self._bounds: Bounds | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_driver"] = None  # sessions and caches stay on the driver
        return state

    @property
    def streams(self) -> DriverStreams:
        if self._driver is None:
            self._driver = DriverStreams(self._options)
        return self._driver

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self._options.freeze_worker_gc:
            freeze_worker_imports()
        if isinstance(partition, DirectRange):
            return read_direct(self._options, self._schema, partition)
        if isinstance(partition, SnapshotRow):
            return read_snapshot(self._options, self._schema, partition)
        assert isinstance(partition, StreamRange)
        return read_range(self._options, self._schema, partition)


class DurableStreamsReader(_Reader, DataSourceReader):
    """``spark.read``: from ``startingOffsets`` to ``endingOffsets`` (default: the tails now)."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        if options.consumer is not None:  # (no commits to record: a batch read is not a query's progress)
            raise OptionError("option 'consumer' applies to streaming reads (spark.readStream) only")
        super().__init__(options, schema)

    def partitions(self) -> Sequence[InputPartition]:
        streams = self.streams
        tails = streams.require()
        start = streams.starting_offsets(tails)
        end = streams.ending_offsets(tails)
        if self._bounds is not None:  # (filterPushdown)
            start, end = narrowed(self._bounds, start, end, streams.offset_at)
        snapshots = snapshot_rows(marked(start, start, streams.snapshots), streams.url)
        planned = [*snapshots, *streams.plan(start, end)]
        return planned or [StreamRange("", "", EARLIEST, EARLIEST, "plain")]


class DurableStreamsPushdownReader(DurableStreamsReader):
    """``spark.read`` with option ``filterPushdown``: filters on ``stream``, ``offset`` and
    ``timestamp`` narrow the plan (``_source.pushdown``); all are handed back, so Spark applies
    them to the rows and the result is exact. A reader of its own: PySpark refuses a reader
    that implements ``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is set."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self._bounds = Bounds.of(filters)
        return filters


class DurableStreamsStreamReader(_Reader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches with admission control and ``Trigger.AvailableNow``."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        if options.ending_timestamp is not None:
            raise OptionError("option 'endingTimestamp' applies to batch reads (spark.read) only")
        if options.filter_pushdown:  # (PySpark asks a stream reader for no filters)
            raise OptionError("option 'filterPushdown' applies to batch reads (spark.read) only")
        super().__init__(options, schema)
        minimum = options.min_messages_per_trigger
        self._pacing = Pacing(minimum, options.max_trigger_delay_s) if minimum is not None else None
        self._target: dict[str, str] | None = None
        self._schema_checked = False
        self._last: SparkOffset | None = None
        self._initial: SparkOffset | None = None
        """What ``initialOffset`` answered: a batch starting there is the query's first."""
        self._deleted_logged: set[str] = set()
        self._recorded: SparkOffset | None = None
        """The last end recorded as option ``consumer``'s position."""
        self._turn = 0
        self._idle = False

    def initialOffset(self) -> SparkOffset:
        tails = self.streams.require()
        start = self.streams.starting_offsets(tails)
        self._initial = marked(self._encode(start, self.streams.incarnations), start, self.streams.snapshots)
        return self._initial

    def _encode(self, offsets: Mapping[str, str], incarnations: Mapping[str, str]) -> SparkOffset:
        """``encode`` with the query's schema recorded (``_source.schema_record``)."""
        return {SCHEMA_KEY: schema_record(self._schema), **encode(offsets, incarnations)}

    def _check_schema(self, offset: SparkOffset) -> None:
        """A restart with a schema the checkpoint's batches cannot continue fails here, once."""
        if not self._schema_checked:
            check_schema(offset.get(SCHEMA_KEY), self._schema)
            self._schema_checked = True

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.streams.tails()

    def getDefaultReadLimit(self) -> ReadLimit:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows, ReadMinRows

        if self._options.max_messages_per_trigger is not None:
            return ReadMaxRows(self._options.max_messages_per_trigger)
        if self._options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self._options.max_bytes_per_trigger)
        if self._options.min_messages_per_trigger is not None:  # (with a maximum: applied from the options)
            return ReadMinRows(self._options.min_messages_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> SparkOffset | None:
        tails = self.streams.cached_tails()
        return self._encode(tails, self.streams.incarnations) if tails else None

    def latestOffset(self, start: SparkOffset | None = None, limit: ReadLimit | None = None) -> SparkOffset:
        """The end of the next batch. After a batch with data the tails are looked up afresh (the
        stream is live: more is likely there already); while idle they are cached for
        ``pollIntervalMs``, since Spark asks every few milliseconds then.

        A stream deleted, or deleted and created again, since ``start`` is data loss (see
        ``_source.incarnations``) unless the server's tombstone shows the query had read all of it
        (``_source.deletions``: a deleted stream then leaves the query, a new incarnation is read
        from its beginning, both logged): with ``failOnDataLoss=false`` a deleted stream keeps its
        offset (it yields nothing) and a new incarnation is read from its beginning."""
        committed = start
        if start is None:  # pyspark < 4.2 calls latestOffset() without arguments
            start = self._last if self._last is not None else self.initialOffset()
        self._check_schema(start)
        offsets, known = decode(start)
        streams = self.streams
        tails = streams.tails(self._options.poll_interval_ms / 1000 if self._idle else 0.0)
        if committed is not None:  # the batch ending there is committed (``_source.consumer_progress``)
            self._record(committed)
        if self._target is not None:
            tails = {key: min(tail, self._target[key]) for key, tail in tails.items() if key in self._target}
        end, incarnations = dict(offsets), dict(known)
        for key, tail in tails.items():
            if key not in offsets and tail == _EMPTY_STREAM:
                continue  # a new, still empty stream of a subscription: nothing to read yet
            first = offsets.get(key, EARLIEST)
            current = streams.incarnations.get(key)
            reason = new_incarnation(first, known.get(key), tail, current) if key in offsets else None
            if reason is not None:
                verdict = judge(streams, key, first, known.get(key))
                if verdict.read_all:
                    log.info("durable_streams: stream %s was created again after this query read all of it", key)
                else:
                    reason = f"{reason}; {verdict.cause}" if verdict.cause else reason
                    self._data_loss(recreated_message(key, first, known.get(key), current, reason))
            end[key] = tail if reason is not None else max(first, tail)
            self._deleted_logged.discard(key)
            incarnations.pop(key, None)
            if current is not None:
                incarnations[key] = current
        for key in sorted(set(offsets) - set(tails)):
            if (key in streams.missing or streams.bucket is not None) and key not in self._deleted_logged:
                verdict = judge(streams, key, offsets[key], known.get(key))
                if verdict.read_all:  # a routine deletion: the stream leaves the query
                    log.info("durable_streams: stream %s was deleted after this query read all of it", key)
                    del end[key]
                    incarnations.pop(key, None)
                    continue
                cause = verdict.cause or str(streams.missing.get(key) or "it is no longer in the bucket's listing")
                self._data_loss(deleted_message(key, offsets[key], known.get(key), cause), once=key)
        begin = {key: range_start(key, (offsets, known), (end, incarnations)) for key in end}
        if incarnations == known and self._held(begin, end, limit):
            end = dict(offsets)  # fewer than minMessagesPerTrigger, within maxTriggerDelay
        else:
            end = self._admit(begin, end, limit)
        self._idle = end == offsets and incarnations == known
        self._last = self._encode(end, incarnations)
        if start == self._initial:  # the first batch: its end keeps its start (``_source.first_batch``)
            self._last = with_first_start(self._last, start)
        return self._last

    def _data_loss(self, message: str, once: str | None = None) -> None:
        """Fail (``failOnDataLoss=true``) or log the loss (once per deleted stream)."""
        if self._options.fail_on_data_loss:
            raise DataLossError(message)
        if once is None or once not in self._deleted_logged:
            log.warning("durable_streams: %s (failOnDataLoss=false: continuing)", message)
        if once is not None:
            self._deleted_logged.add(once)

    def _held(self, start: Mapping[str, str], end: Mapping[str, str], limit: ReadLimit | None) -> bool:
        """``minMessagesPerTrigger``: hold the batch back (``_source.pacing``); never under
        ``Trigger.AvailableNow`` or when Spark asks for everything available."""
        pacing = self._pacing
        if pacing is None or self._target is not None or type(limit).__name__ == "ReadAllAvailable":
            return False
        streams, pending = self.streams, 0
        for key in sorted(end):
            first = start.get(key, EARLIEST)
            if end[key] <= first or pending >= pacing.min_messages:
                continue
            if streams.boundaries(key) and is_seq_offset(first) and SEQ_OFFSET.match(end[key]):
                pending += pending_messages(first, end[key])
            else:
                pending += streams.read_forward(key, first, end[key], pacing.min_messages - pending, None)[1]
        return pacing.hold(pending)

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

    def partitions(self, start: SparkOffset, end: SparkOffset) -> Sequence[InputPartition]:
        self._check_schema(start)  # (a restart may replay its last batch without asking for offsets)
        start = batch_start(start, end)  # (a replayed first batch: the start it was planned with)
        first, last = decode(start), decode(end)
        planned = self.streams.plan({key: range_start(key, first, last) for key in last[0]}, last[0])
        return [*snapshot_rows(start, self.streams.url), *planned]

    def commit(self, end: SparkOffset) -> None:
        """Spark calls this once the batch ending at ``end`` is committed (never for a failed batch;
        AvailableNow skips the last one): with option ``consumer`` the server records it as that
        consumer's position (``_source.consumer_progress``); else there is nothing to do."""
        self._record(end)

    def _record(self, end: SparkOffset) -> None:
        consumer = self._options.consumer
        if consumer is not None and end != self._recorded and record_progress(self.streams, consumer, end):
            self._recorded = end

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
