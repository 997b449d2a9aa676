"""``startingOffsets=snapshot``: a new query starts each stream at its latest snapshot
(extensions section 2), emitted as the stream's first row, then reads the messages after it,
so a query on a compacted stream does not replay its history.

Where a new query starts, the driver asks each stream for its latest snapshot: the stream's
start offset is the snapshot's offset (the first message after it), and the start carries the
snapshot's offset as a marker, ``{"offset": o, "snapshot": o, ...}`` in the Spark offset
(``decode`` ignores it). The batch starting there plans one ``SnapshotRow`` partition per
marked stream besides the messages; later batches start from ends that carry no marker, so
the snapshot is emitted once (a replayed first batch emits it again, as it does its messages).
A stream without a snapshot starts at its beginning, as ``earliest``.

The snapshot's row: ``stream`` as any row, ``offset`` null (only the snapshot's row has none
on our server: every message has its own offset), ``value`` the snapshot's bytes (text for a
string ``value`` column), ``content_type`` the snapshot's, ``timestamp`` null; user columns
are parsed from it as from a JSON message. A snapshot gone by the time the task reads it (a
newer one replaced it and it was deleted) is data loss: the task fails naming the stream
under ``failOnDataLoss=true``, and the row is left out (logged) under ``false``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from .._connect import connect
from ..client import Message, NotFound, Stream
from ..options import ReadOptions
from .rows import RowBuilder
from .task_reader import DataLossError

log = logging.getLogger("pyspark_durable_streams.source")

MARKER = "snapshot"


@dataclass(frozen=True)
class SnapshotRow(InputPartition):
    """The snapshot of stream ``key`` at ``offset``, as one row."""

    key: str
    url: str
    offset: str


def snapshot_start(stream: Stream) -> str | None:
    """The offset of the stream's latest snapshot, ``None`` when it has none: from a HEAD's
    ``Stream-Snapshot-Offset``, so the driver never downloads the snapshot itself (a task does)."""
    return stream.metadata().snapshot_offset


def marked(spark: Mapping[str, Any], offsets: Mapping[str, str], snapshots: Mapping[str, str]) -> dict[str, Any]:
    """The Spark offset ``spark`` with each stream of ``snapshots`` marked as starting there."""
    result = dict(spark)
    for key, offset in snapshots.items():
        if offsets.get(key) == offset:
            entry = result[key]
            result[key] = {**(entry if isinstance(entry, Mapping) else {"offset": entry}), MARKER: offset}
    return result


def snapshot_rows(spark: Mapping[str, Any], url: Any) -> list[SnapshotRow]:
    """The snapshot partitions a batch starting at ``spark`` reads first (``url(key)``: its URL)."""
    rows = []
    for key, entry in sorted(spark.items()):
        if isinstance(entry, Mapping) and isinstance(entry.get(MARKER), str) and entry.get("offset") == entry[MARKER]:
            rows.append(SnapshotRow(key, url(key), entry[MARKER]))
    return rows


def read_snapshot(options: ReadOptions, schema: StructType, part: SnapshotRow) -> Iterator[pa.RecordBatch]:
    with connect(options.connection, part.url) as client:
        try:
            found = client.stream(part.url).snapshots.get(part.offset)
        except NotFound as exc:
            message = (
                f"the snapshot of stream {part.key} at offset {part.offset}, where this query starts, is gone "
                f"(a newer snapshot replaced it): {exc}"
            )
            if options.fail_on_data_loss:
                raise DataLossError(f"{message}. Set option failOnDataLoss=false to go on without it") from exc
            log.warning("durable_streams: %s (failOnDataLoss=false: continuing without it)", message)
            return
    rows = RowBuilder(schema, part.key)
    rows.add(Message(found.data, found.content_type, offset=None, next_offset=part.offset))
    yield rows.flush()
