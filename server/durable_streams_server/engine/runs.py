"""Runs: consecutive whole messages of one stream, in the form their tier holds them.

A read gathers runs (``engine.reads``): ``MemoryRun`` from the plain appends of the memory
tail (Python lists), ``ArrowRun`` from its bulk appends (the batch's Arrow buffers, sliced,
never a Python object per message unless a plain read asks for lists), ``StoredRun`` from
Delta. Ordinary reads turn every run into lists of bytes; Arrow reads turn every run into
a table of ``COLUMNS``; the body of a binary read takes every run as buffers (``views``), the
body of a JSON read as buffers of the messages with commas between them (``joined``).

Views: consecutive messages of one Arrow chunk are consecutive bytes of its values buffer
(a binary array stores its values end to end, ``offsets`` marking where each starts), so the
body of a run read from Delta or from a bulk append is one ``memoryview`` per chunk into the
buffers the read decoded -- no Python object per message, no copy before the socket.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..storage.message_batch import MessageBatch, value_bytes

TIMESTAMP = pa.timestamp("us", tz="UTC")
COLUMNS = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts", TIMESTAMP, nullable=False),
        pa.field("data", pa.binary(), nullable=False),
    ]
)
"""A run as Arrow: sequence number, append time and bytes of each message."""


class Run(Protocol):
    """Consecutive whole messages of one stream."""

    def __len__(self) -> int: ...

    def nbytes(self) -> int: ...

    def first_size(self) -> int:
        """The size of the run's first message."""
        ...

    def lists(self) -> tuple[list[bytes], list[int]]:
        """The messages' bytes and append times (ms)."""
        ...

    def columns(self) -> pa.Table:
        """The messages as a table of ``COLUMNS``."""
        ...

    def views(self) -> list[bytes | memoryview]:
        """The messages' bytes end to end, as buffers (``memoryview`` of the Arrow buffers
        that hold them where the tier holds Arrow: no copy)."""
        ...

    def joined(self) -> list[bytes | memoryview]:
        """The messages with a comma between each (a JSON array's elements), as buffers."""
        ...


@dataclass(frozen=True, slots=True)
class MemoryRun:
    first: int
    data: list[bytes]
    stamps: array[int]

    def __len__(self) -> int:
        return len(self.data)

    def nbytes(self) -> int:
        return sum(len(data) for data in self.data)

    def first_size(self) -> int:
        return len(self.data[0])

    def lists(self) -> tuple[list[bytes], list[int]]:
        return self.data, self.stamps.tolist()

    def views(self) -> list[bytes | memoryview]:
        return [b"".join(self.data)] if self.data else []  # (one buffer: a body of many small messages)

    def joined(self) -> list[bytes | memoryview]:
        return [b",".join(self.data)] if self.data else []

    def columns(self) -> pa.Table:
        seqs = pa.array(range(self.first, self.first + len(self.data)), pa.int64())
        stamps = pa.array(np.frombuffer(self.stamps, np.int64), pa.timestamp("ms", tz="UTC")).cast(TIMESTAMP)
        return pa.Table.from_arrays([seqs, stamps, pa.array(self.data, pa.binary())], schema=COLUMNS)


@dataclass(frozen=True, slots=True)
class StoredRun:
    table: pa.Table
    """``seq``, ``ts``, ``data`` (and ``meta``) as the history read returned them."""

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def nbytes(self) -> int:
        return value_bytes(self.table["data"])

    def first_size(self) -> int:
        return value_bytes(self.table["data"].slice(0, 1))

    def lists(self) -> tuple[list[bytes], list[int]]:
        stamps = pc.divide(self.table["ts"].cast(pa.int64()), 1000)
        return self.table["data"].to_pylist(), stamps.to_pylist()

    def columns(self) -> pa.Table:
        return self.table.select(COLUMNS.names).cast(COLUMNS)

    def views(self) -> list[bytes | memoryview]:
        return binary_views(self.table["data"])

    def joined(self) -> list[bytes | memoryview]:
        return comma_joined(self.table["data"])


@dataclass(frozen=True, slots=True)
class ArrowRun:
    """Messages of one bulk append (or a slice of them): its buffers and its append time."""

    first: int
    data: pa.BinaryArray
    ts_ms: int

    def __len__(self) -> int:
        return len(self.data)

    def nbytes(self) -> int:
        return value_bytes(self.data)

    def first_size(self) -> int:
        return len(self.data[0].as_py())

    def lists(self) -> tuple[list[bytes], list[int]]:
        return self.data.to_pylist(), [self.ts_ms] * len(self.data)

    def views(self) -> list[bytes | memoryview]:
        return binary_views(self.data)

    def joined(self) -> list[bytes | memoryview]:
        return comma_joined(self.data)

    def columns(self) -> pa.Table:
        count = len(self.data)
        seqs = pa.array(np.arange(self.first, self.first + count, dtype=np.int64))
        stamps = pa.array(np.full(count, self.ts_ms * 1000, dtype=np.int64)).cast(TIMESTAMP)
        return pa.Table.from_arrays([seqs, stamps, self.data], schema=COLUMNS)


def binary_views(data: pa.ChunkedArray | pa.Array) -> list[bytes | memoryview]:
    """The values of a binary column end to end: one view per chunk into its values buffer
    (its offsets say where the chunk's first value starts and its last ends), or the values
    as bytes for any other type (a large or view type a file may hold)."""
    views: list[bytes | memoryview] = []
    for chunk in data.chunks if isinstance(data, pa.ChunkedArray) else [data]:
        if chunk.type != pa.binary() or chunk.null_count:
            views += [value for value in chunk.to_pylist() if value]
        elif len(chunk):
            batch = MessageBatch(chunk)
            if batch.nbytes:
                views.append(batch.values())
    return views


def comma_joined(data: pa.ChunkedArray | pa.Array) -> list[bytes | memoryview]:
    """The values of a binary column with a comma between each: per chunk one buffer that
    Arrow joins (one copy, no Python object per value), and a comma between chunks."""
    parts: list[bytes | memoryview] = []
    for chunk in data.chunks if isinstance(data, pa.ChunkedArray) else [data]:
        if chunk.type != pa.binary():  # (a large or view type a file may hold)
            chunk = chunk.cast(pa.binary())
        if chunk.null_count:
            chunk = chunk.drop_null()
        if not len(chunk):
            continue
        whole = pa.ListArray.from_arrays(pa.array([0, len(chunk)], pa.int32()), chunk)
        joined = MessageBatch(pc.binary_join(whole, b","))
        parts += [b",", joined.values()] if parts else [joined.values()]
    return parts
