"""The ``durable_streams`` sink: ``df.write`` and ``df.writeStream`` append rows as messages.

Target: one stream (option ``url``), or per row the stream named by the ``stream`` column
(option ``server``, plus ``bucket`` for the bucketed surface). Payload: the ``value`` column
(string or binary), or, for ``application/json`` streams without a ``value`` column, each row
as one JSON object of its columns (the ``stream`` routing column left out).

Content type of the target (created with ``createStream``, and checked): option
``contentType``; else the target's own when it exists; else the content type the
``durable_streams`` source recorded in the ``value`` column's metadata (when every stream it
read has that type), so a ``readStream`` of a JSON stream is copied as JSON, message for
message; else ``application/octet-stream`` with a ``value`` column, ``application/json``
without. Only ``mode("append")``: Spark refuses its default mode for Python data sources
itself, and the sink refuses ``overwrite``.

Exactly-once, and what it rests on
----------------------------------
Every write task appends with an idempotent-producer identity (spec 5.2.1) derived from what
Spark persists (see ``_sink.producer_identity``): Producer-Id = (query id, partition id),
Producer-Epoch = batch id, Producer-Seq = 0, 1, 2 … per request and target stream. Request
bodies are a pure function of the task's rows in order (``_sink.encoding``). So when Spark
runs the same (batch, partition) again — a task retry, a speculative copy, or the last batch
re-run after the query restarts from its checkpoint — and the rows are the same in the same
order, every request is byte-identical with the same triple: the server stores the ones it
has (``204``) and appends only the rest (``200``). A task that died after k requests thus
re-sends seq 0..k-1 (all ``204``) and continues at seq k.

The guarantee holds when:

* the input of each micro-batch is deterministic: a replayable source (files, Kafka, Durable
  Streams, Delta …) and a deterministic plan up to the sink. ``rate``/``rate-micro-batch``
  with wall-clock columns, ``rand()``, ``current_timestamp()``, non-deterministic UDFs, or a
  shuffle before the sink (``repartition``, unordered joins/aggregations, whose row order within
  a partition depends on fetch timing) can change rows or their order between attempts; then a
  retry can store rows twice or drop some;
* the query restarts from the same checkpoint with the same partitioning (a changed
  ``spark.sql.shuffle.partitions`` or input splitting changes which rows a partition holds);
* the server keeps producer state as long as the data (ours does, durably and atomically with
  the data; servers that expire producer state end the guarantee after that expiry).

Where it ends: appends are visible to readers as soon as they are stored, before Spark commits
the batch (read-uncommitted); an aborted batch that is never re-run leaves its partial rows.
Batch writes (``df.write``) get a fresh identity per job: running the same job twice appends
twice, unless both runs pass the same ``producerId`` (and the same input), which makes the
second a no-op. A stream closed by ``closeStream`` refuses later appends (the job fails).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import datasource as _ds
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from ._connect import connect
from ._sink.encoding import RequestCutter, checked_messages, row_messages
from ._sink.producer_identity import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY, JobIdentity, job_identity, task_identity
from ._sink.sender import FailureHook, SinkError, TaskSender
from ._worker_gc import freeze_worker_imports
from .client import Backoff, Client, Stream, errors
from .client.delivery import retrying
from .client.models import DEFAULT_CONTENT_TYPE, JSON_CONTENT_TYPE, is_json, media_type
from .options import OptionError, WriteOptions
from .source import CONTENT_TYPE_METADATA

__all__ = ["DurableStreamsStreamWriter", "DurableStreamsWriter", "SinkCommitMessage", "SinkError"]

VALUE_COLUMN = "value"
STREAM_COLUMN = "stream"
_ROWS_PER_CHUNK = 8192

# Arrow writers (PySpark 4.0 batch / 4.1 streaming) get pyarrow RecordBatches: no Python Row per
# row; older PySpark gets the Row-based bases, and ``write`` converts Rows to RecordBatches.
_BatchBase: Any = getattr(_ds, "DataSourceArrowWriter", _ds.DataSourceWriter)
_StreamBase: Any = getattr(_ds, "DataSourceStreamArrowWriter", _ds.DataSourceStreamWriter)


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task delivered (returned to the driver's ``commit``)."""

    partition_id: int
    producer_id: str
    epoch: int
    messages: int = 0
    requests: int = 0
    duplicates: int = 0
    retries: int = 0
    bytes: int = 0
    streams: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Target:
    url: str
    content_type: str
    bulk: bool = False
    """The server takes bulk appends on this stream (HEAD says so): requests carry many messages."""


class _Sink:
    """What the batch and streaming writers share; pickled to the executors."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool, *, streaming: bool) -> None:
        if overwrite:
            raise OptionError(
                "the durable_streams sink only appends (a durable stream is append-only; nothing can be "
                'overwritten): write with .mode("append") (streaming: outputMode("append"))'
            )
        if streaming and options.close_stream:
            raise OptionError("option 'closeStream' applies to batch writes (df.write); a streaming query never ends")
        self.options = options
        fields = {f.name: f for f in schema.fields}
        self.value_column = VALUE_COLUMN if VALUE_COLUMN in fields else None
        if self.value_column and not isinstance(fields[VALUE_COLUMN].dataType, StringType | BinaryType):
            raise OptionError(
                f"column 'value' must be string or binary, not {fields[VALUE_COLUMN].dataType.simpleString()}: "
                "cast it, or drop it to write JSON streams as one JSON object per row"
            )
        self.route_column = STREAM_COLUMN if options.server else None
        if self.route_column and not isinstance(getattr(fields.get(STREAM_COLUMN), "dataType", None), StringType):
            raise OptionError(
                "with option 'server' each row names its target in a string column 'stream' "
                "(a stream id, or a path when no 'bucket' is given); use option 'url' for one stream"
            )
        self.json_columns = [name for name in schema.names if name != self.route_column]
        self.recorded_content_type: str | None = None
        """What the durable_streams source recorded on the ``value`` column: the type of the streams read."""
        if self.value_column is not None:
            self.recorded_content_type = fields[VALUE_COLUMN].metadata.get(CONTENT_TYPE_METADATA)
        self.identity: JobIdentity = job_identity(options, streaming=streaming)
        self.target: _Target | None = None
        if options.url is not None:
            with self._client() as client:
                self.target = self._resolve(client, options.url, option="url")

    # -- driver and executors -----------------------------------------------------------

    def _client(self) -> Client:
        base_url = self.options.url or self.options.server
        assert base_url is not None
        return connect(self.options.connection, base_url)

    def _default_content_type(self, stream: Stream) -> str:
        """Option contentType; else the existing stream's own; else the type the source recorded on
        the ``value`` column; else octet-stream for a ``value`` column, JSON for rows of columns."""
        if self.options.content_type is not None:
            return self.options.content_type
        try:
            return stream.metadata().content_type
        except errors.NotFound:
            pass
        if self.recorded_content_type is not None:
            return self.recorded_content_type
        return DEFAULT_CONTENT_TYPE if self.value_column else JSON_CONTENT_TYPE

    def _resolve(self, client: Client, url: str, *, option: str) -> _Target:
        """Create or look up one target stream; check its content type against the options and rows.
        A server that answers "later" (503, 429: a shard moving to another cluster node) is asked
        again with backoff for ``deliveryTimeoutMs``, as the appends are; a server that does not
        answer at all fails the job at once, naming the option."""
        stream = client.stream(url)
        backoff = Backoff(initial_s=0.05, max_s=2.0, deadline_s=self.options.delivery_timeout_s)
        try:
            if self.options.create_stream:
                wanted = self._default_content_type(stream)
                try:
                    created = retrying(
                        lambda: stream.create(wanted, ttl_seconds=self.options.ttl_seconds),
                        backoff=backoff,
                        retry=lambda exc: isinstance(exc, errors.ANSWERED_LATER),
                    )
                except errors.Conflict as exc:
                    raise SinkError(
                        f"the target stream {url} exists with another configuration than contentType={wanted!r}"
                        f"{f', ttlSeconds={self.options.ttl_seconds}' if self.options.ttl_seconds else ''} "
                        f"(server: {exc.message or exc}); match its content type with option 'contentType'"
                    ) from exc
                content_type, closed = created.content_type or wanted, created.closed
            else:
                try:
                    meta = stream.metadata()  # retries answers saying later itself
                except errors.NotFound as exc:
                    raise SinkError(
                        f"the target stream {url} does not exist: create it first, or set option createStream=true"
                    ) from exc
                content_type, closed = meta.content_type, meta.closed
                wanted_type = self.options.content_type
                if wanted_type is not None and media_type(wanted_type) != media_type(content_type):
                    raise SinkError(
                        f"wrong content type: the target stream {url} is {content_type!r}, option contentType "
                        f"says {wanted_type!r}"
                    )
        except errors.TransportError as exc:
            raise SinkError(f"cannot reach the Durable Streams server for option '{option}' ({url}): {exc}") from exc
        except errors.HTTPStatusError as exc:
            raise SinkError(f"the server refused the target stream {url} (option '{option}'): {exc}") from exc
        if closed:
            raise SinkError(f"the target stream {url} is closed: it accepts no more appends")
        if self.value_column is None and not is_json(content_type):
            raise SinkError(
                f"the target stream {url} has content type {content_type!r}, and the rows have no 'value' column: "
                "rows are written as JSON objects only to application/json streams. Add a string or binary "
                "'value' column with each message's bytes"
            )
        try:
            bulk = stream.metadata().bulk_append
        except errors.DurableStreamsError as exc:
            raise SinkError(f"cannot read the metadata of the target stream {url}: {exc}") from exc
        return _Target(url, content_type, bulk)

    def _route_url(self, name: str | None) -> str:
        server = self.options.server
        assert server is not None
        if not name:
            raise SinkError("a row has a null or empty 'stream' column: every row must name its target stream")
        if self.options.bucket is not None:
            return f"{server.rstrip('/')}/{quote(self.options.bucket, safe='')}/{quote(name, safe='')}"
        if name.startswith("/"):
            return server.rstrip("/") + quote(name, safe="/")
        return f"{server.rstrip('/')}/v1/stream/{quote(name, safe='/')}"

    # -- executors ----------------------------------------------------------------------

    def _write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        if self.options.freeze_worker_gc:
            freeze_worker_imports()
        context = TaskContext.get()
        assert context is not None, "write() runs in a Spark task"
        properties = {key: context.getLocalProperty(key) for key in (QUERY_ID_PROPERTY, BATCH_ID_PROPERTY)}
        producer_id, epoch = task_identity(self.identity, partition_id=context.partitionId(), local_property=properties)
        hook = self.options.test_fail_after_requests
        client = self._client()
        sender = TaskSender(
            client,
            producer_id=producer_id,
            epoch=epoch,
            max_in_flight=self.options.max_requests_in_flight,
            delivery_timeout_s=self.options.delivery_timeout_s,
            hook=FailureHook(hook) if hook is not None and context.attemptNumber() == 0 else None,
        )
        targets: dict[str | None, _Target] = {}
        cutters: dict[str, RequestCutter] = {}
        count = 0
        try:
            for batch in _record_batches(iterator):
                messages = row_messages(batch, value_column=self.value_column, json_columns=self.json_columns)
                for target, selected in self._by_target(client, targets, batch, messages):
                    cutter = cutters.get(target.url)
                    if cutter is None:
                        cutter = cutters[target.url] = RequestCutter(
                            target.content_type,
                            max_bytes=self.options.max_batch_bytes,
                            max_messages=self.options.max_batch_messages,
                            bulk=target.bulk,
                        )
                    for request in cutter.add(checked_messages(selected, json_stream=cutter.json, url=target.url)):
                        sender.send(target.url, target.content_type, request, bulk=target.bulk)
                count += len(messages)
            by_url = {target.url: target for target in targets.values()}
            for url, cutter in cutters.items():
                for request in cutter.finish():
                    sender.send(url, by_url[url].content_type, request, bulk=by_url[url].bulk)
            sender.finish()
        except BaseException:
            sender.abandon()
            raise
        finally:
            client.close()
        stats = sender.stats
        return SinkCommitMessage(
            partition_id=context.partitionId(),
            producer_id=producer_id,
            epoch=epoch,
            messages=count,
            requests=stats.requests,
            duplicates=stats.duplicates,
            retries=stats.retries,
            bytes=stats.bytes,
            streams=list(cutters),
        )

    def _by_target(
        self, client: Client, targets: dict[str | None, _Target], batch: pa.RecordBatch, messages: pa.Array
    ) -> Iterator[tuple[_Target, pa.Array]]:
        """Each target's messages of ``batch``, in row order (targets are resolved on first sight)."""
        if self.route_column is None:
            assert self.target is not None
            targets[None] = self.target
            yield self.target, messages
            return
        names = batch.column(self.route_column)
        distinct = pc.unique(names)
        for name in distinct.to_pylist():
            if name not in targets:
                targets[name] = self._resolve(client, self._route_url(name), option="server")
        urls = pa.array([targets[name].url for name in distinct.to_pylist()], pa.string())
        rows = pa.table({"url": pc.take(urls, pc.index_in(names, value_set=distinct)), "row": np.arange(len(names))})
        by_url = {target.url: target for target in targets.values()}
        groups = rows.group_by("url", use_threads=False).aggregate([("row", "list")])
        indices = groups["row_list"].combine_chunks()
        for index, url in enumerate(groups["url"].to_pylist()):
            yield by_url[url], messages.take(indices[index].values)


def _record_batches(iterator: Iterator[Any]) -> Iterator[pa.RecordBatch]:
    """RecordBatches as they come (Arrow writers), or Rows grouped into RecordBatches (older PySpark)."""
    rows: list[dict[str, Any]] = []
    for item in iterator:
        if isinstance(item, pa.RecordBatch):
            yield item
            continue
        rows.append(item.asDict(recursive=True))
        if len(rows) >= _ROWS_PER_CHUNK:
            yield pa.RecordBatch.from_pylist(rows)
            rows = []
    if rows:
        yield pa.RecordBatch.from_pylist(rows)


class DurableStreamsWriter(_BatchBase):  # type: ignore[misc]
    """``df.write.format("durable_streams").mode("append").save()``."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        self.sink = _Sink(options, schema, overwrite, streaming=False)

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        return self.sink._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """All tasks succeeded: with ``closeStream``, close every stream this job wrote (or the ``url``)."""
        if not self.sink.options.close_stream:
            return
        urls = {url for message in messages if isinstance(message, SinkCommitMessage) for url in message.streams}
        if self.sink.target is not None:
            urls.add(self.sink.target.url)
        with self.sink._client() as client:
            for url in sorted(urls):
                client.stream(url).close()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: stored appends stay (a re-run with the same ``producerId`` deduplicates them)."""


class DurableStreamsStreamWriter(_StreamBase):  # type: ignore[misc]
    """``df.writeStream.format("durable_streams").option("checkpointLocation", …).start()``."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        self.sink = _Sink(options, schema, overwrite, streaming=True)

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        return self.sink._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every task's appends are stored and acknowledged before it returns."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: a re-run of this batch re-sends the same triples and is deduplicated."""
