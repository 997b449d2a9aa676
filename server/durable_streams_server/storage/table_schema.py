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
