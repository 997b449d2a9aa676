"""The Delta table's schema and row kinds (documented in ``delta_log`` and the README)."""

from __future__ import annotations

import pyarrow as pa

SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string(), nullable=False),
        pa.field("stream_uid", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("data", pa.binary(), nullable=True),
        pa.field("meta", pa.string(), nullable=True),
        pa.field("lsn", pa.int64(), nullable=False),
    ]
)

KIND_MESSAGE = "message"
KIND_STATE = "state"
KIND_SNAPSHOT = "snapshot"
KIND_SUBSCRIPTION = "subscription"


def plain(table: pa.Table) -> pa.Table:
    """delta-rs scans produce view types; the table's own types keep the rest of the code simple."""
    return table.cast(pa.schema([SCHEMA.field(name).with_nullable(True) for name in table.column_names]))


def plain_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``plain`` for one batch of all the table's columns."""
    return batch.cast(SCHEMA)
