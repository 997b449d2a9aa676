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
from ._source.admission import RateLimit, delayed, read_limits
from ._source.consumer_progress import record_progress
from ._source.direct_plans import DirectRange
from ._source.direct_reads import read_direct
from ._source.driver_streams import DriverStreams
from ._source.first_batch import batch_start, with_first_start
from ._source.incarnations import SparkOffset, decode, encode, range_start
from ._source.offsets import EARLIEST
from ._source.pacing import Pacing
from ._source.pushdown import Bounds, narrowed
from ._source.schema_record import SCHEMA_KEY, check_schema, schema_record
from ._source.snapshot_start import SnapshotRow, marked, read_snapshot, snapshot_rows
from ._source.stream_changes import Position, StreamChanges
from ._source.task_reader import DataLossError, StreamRange, read_range
from ._worker_gc import freeze_worker_imports
from .client import TransportError
from .client.models import is_json, media_type
from .options import OptionError, ReadOptions, TimestampEnd

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
        if isinstance(options.end, TimestampEnd):
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
        """What ``initialOffset`` answered while no batch was planned: a batch starting there is the query's first."""
        self._changes = StreamChanges(options.fail_on_data_loss)
        self._rate = RateLimit()
        self._recorded: SparkOffset | None = None
        """The last end recorded as option ``consumer``'s position."""
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
        """The end of the next batch, in named steps (as Kafka's): where the batch starts, what is
        available now, what became of each stream since the start (``_source.stream_changes``:
        new streams, new incarnations and deletions, judged for data loss), then what a trigger's
        pacing delays or else what the read limit admits (``_source.admission``)."""
        begin = self._batch_start(start)
        was = decode(begin)
        tails = self._available()
        if start is not None:  # the batch ending there is committed (``_source.consumer_progress``)
            self._record(start)
        now = self._changes.follow(self.streams, was, tails)
        reading = {key: range_start(key, was, now) for key in now[0]}
        if now[1] == was[1] and delayed(self._active_pacing(), self.streams, reading, now[0], limit):
            end = dict(was[0])  # fewer than minMessagesPerTrigger, within maxTriggerDelay
        else:
            end = self._rate.admit(self.streams, reading, now[0], read_limits(limit, self._options))
        return self._answer(begin, was, (end, now[1]))

    def _batch_start(self, start: SparkOffset | None) -> SparkOffset:
        """Spark's start (pyspark < 4.2 passes none: the last end answered, or the initial offset),
        checked against the query's schema."""
        if start is None:
            start = self._last if self._last is not None else self.initialOffset()
        self._check_schema(start)
        return start

    def _available(self) -> dict[str, str]:
        """The tails now, capped at ``Trigger.AvailableNow``'s target. After a batch with data they
        are looked up afresh (the stream is live: more is likely there already); while idle they
        are cached for ``pollIntervalMs``, since Spark asks every few milliseconds then."""
        tails = self.streams.tails(self._options.poll_interval_ms / 1000 if self._idle else 0.0)
        target = self._target
        if target is None:
            return tails
        return {key: min(tail, target[key]) for key, tail in tails.items() if key in target}

    def _active_pacing(self) -> Pacing | None:
        """``minMessagesPerTrigger``'s pacing, except under ``Trigger.AvailableNow`` (all of its target is read)."""
        return self._pacing if self._target is None else None

    def _answer(self, begin: SparkOffset, was: Position, end: Position) -> SparkOffset:
        """The Spark offset of ``end``, remembered: idle when nothing moved, and a first batch's
        end keeps its start (``_source.first_batch``). Once Spark asks from anywhere else a batch
        was planned, and no later batch is the first, though its start may read as the initial
        offset (``latest`` with nothing new): its end keeping that start would differ from the
        start in text alone, and Spark would run empty batches without end."""
        self._idle = end == was
        self._last = self._encode(*end)
        if begin == self._initial:
            self._last = with_first_start(self._last, begin)
        else:
            self._initial = None
        return self._last

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
