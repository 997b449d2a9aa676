"""Rows built column-wise from Arrow responses (``RowBuilder.arrow_batches``): no Spark, no server."""

from __future__ import annotations

import datetime

import pyarrow as pa
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from pyspark_durable_streams._source.offsets import seq_offset
from pyspark_durable_streams._source.rows import BATCH_ROWS, RowBuilder
from pyspark_durable_streams.client.arrow import ArrowSlice

SCHEMA = StructType(
    [
        StructField("stream", StringType(), False),
        StructField("offset", StringType()),
        StructField("value", StringType()),
        StructField("content_type", StringType()),
        StructField("timestamp", TimestampType()),
    ]
)
KEY = "v1/stream/rows"


def _slice(first: int, count: int, content_type: str) -> ArrowSlice:
    table = pa.table(
        {
            "seq": pa.array(range(first, first + count), pa.int64()),
            "ts": pa.array([1_000_000 * seq for seq in range(first, first + count)], pa.timestamp("us", tz="UTC")),
            "data": pa.array([b"m%d" % seq for seq in range(first, first + count)], pa.binary()),
        }
    )
    return ArrowSlice(seq_offset(first), seq_offset(first + count), content_type, table)


def test_each_row_carries_its_stream_and_content_type_whatever_the_batch_sizes() -> None:
    # (the constant columns are cut from the longest made so far: shorter, longer, then another
    # content type must each come out whole and right)
    builder = RowBuilder(SCHEMA, KEY)
    first = 0
    for count, content_type in ((5, "text/plain"), (3, "text/plain"), (BATCH_ROWS + 7, "text/plain"), (4, "a/b")):
        rows = [
            row
            for batch in builder.arrow_batches(_slice(first, count, content_type), seq_offset(first + count))
            for row in batch.to_pylist()
        ]
        assert rows == [
            {
                "stream": KEY,
                "offset": seq_offset(seq),
                "value": f"m{seq}",
                "content_type": content_type,
                "timestamp": datetime.datetime.fromtimestamp(seq, datetime.UTC),
            }
            for seq in range(first, first + count)
        ]
        first += count


def test_the_value_column_is_the_responses_bytes_not_a_copy() -> None:
    # (a batch's message bytes are most of what a read moves: ``combine_chunks`` of a one-chunk
    # column copied all of them once more, batch after batch)
    found = _slice(10, 100, "application/json")
    (batch,) = RowBuilder(SCHEMA, KEY).arrow_batches(found, seq_offset(110))
    assert batch.num_rows == 100
    value_bytes = batch.column(batch.schema.get_field_index("value")).buffers()[2]
    assert value_bytes.address == found.table["data"].chunk(0).buffers()[2].address


def test_rows_of_a_response_in_several_chunks() -> None:
    pieces = [_slice(first, 4, "text/plain").table for first in (0, 4, 8)]
    found = ArrowSlice(seq_offset(0), seq_offset(12), "text/plain", pa.concat_tables(pieces))
    assert found.table["data"].num_chunks == 3
    rows = [row for batch in RowBuilder(SCHEMA, KEY).arrow_batches(found, seq_offset(10)) for row in batch.to_pylist()]
    assert [(row["offset"], row["value"]) for row in rows] == [(seq_offset(seq), f"m{seq}") for seq in range(10)]
