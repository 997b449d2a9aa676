"""The baseline of ``spark_bench.py``'s read: an in-memory Python data source yielding the rows our
source yields for a JSON stream (same schema, same values), made in memory as Arrow batches.

Every column is built by Arrow, none from a Python object per row: the message values and
offsets with ``pyarrow.compute`` over a NumPy range, the constant columns (stream, content type,
timestamp) with ``pyarrow.repeat``. So it is the ceiling of a plain Python source, and what it
costs beyond that is Spark's and the Python worker's.

Two names for the one source, so that a read can choose its Python workers (Spark keys its
worker pools by the registered function's environment, ``worker_pools.register_in_pool``):
``bench_in_memory_our_workers`` (``InMemoryInOurWorkers``, registered plainly) runs in the
workers that run ``durable_streams`` too, so the two reads meet the same worker conditions
(imports, collector settings, anything a task leaves in its process); ``bench_in_memory``
(``InMemorySource``) is registered into a pool of its own, workers no task of ours ran in.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

READ_SCHEMA = "stream string, offset string, value string, content_type string, timestamp timestamp"
ROWS_PER_PARTITION = 100_000  # as the connector's default messagesPerPartition
ROWS_PER_BATCH = 10_000

# A message is 100 bytes of JSON: {"id":"0000000042","kind":"bench","pad":"xxx…"}.
_PREFIX, _MIDDLE = '{"id":"', '","kind":"bench","pad":"'
_PAD = "x" * (100 - len(_PREFIX) - 10 - len(_MIDDLE) - 2)
_SUFFIX = _MIDDLE + _PAD + '"}'


def json_values(first: int, count: int) -> pa.Array:
    """Messages ``first … first+count-1`` without a Python object per row (the source's ceiling)."""
    ids = pc.utf8_lpad(pc.cast(pa.array(np.arange(first, first + count)), pa.string()), 10, "0")
    return pc.binary_join_element_wise(_PREFIX, ids, _SUFFIX, "")


class RowRange(InputPartition):
    def __init__(self, first: int, end: int) -> None:
        self.first, self.end = first, end


class InMemoryReader(DataSourceReader):
    """The rows our source yields for a JSON stream (same schema, same values), made in memory."""

    def __init__(self, rows: int, stream: str) -> None:
        self.rows, self.stream = rows, stream

    def partitions(self) -> Sequence[InputPartition]:
        return [RowRange(i, min(i + ROWS_PER_PARTITION, self.rows)) for i in range(0, self.rows, ROWS_PER_PARTITION)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RowRange)
        stream = pa.scalar(self.stream, pa.string())
        content_type = pa.scalar("application/json", pa.string())
        now = pa.scalar(int(time.time() * 1_000_000), pa.timestamp("us", tz="UTC"))
        for first in range(partition.first, partition.end, ROWS_PER_BATCH):
            count = min(ROWS_PER_BATCH, partition.end - first)
            seqs = pc.utf8_lpad(pc.cast(pa.array(np.arange(first, first + count)), pa.string()), 16, "0")
            yield pa.RecordBatch.from_arrays(
                [
                    pa.repeat(stream, count),
                    pc.binary_join_element_wise(seqs, "_0000000000000000", ""),
                    json_values(first, count),
                    pa.repeat(content_type, count),
                    pa.repeat(now, count),
                ],
                names=["stream", "offset", "value", "content_type", "timestamp"],
            )


class InMemorySource(DataSource):
    """``spark.read.format("bench_in_memory").option("rows", N).option("stream", name)``:
    registered into a worker pool of its own (``worker_pools.register_in_pool``)."""

    @classmethod
    def name(cls) -> str:
        return "bench_in_memory"

    def schema(self) -> str:
        return READ_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return InMemoryReader(int(self.options["rows"]), self.options.get("stream", "memory"))


class InMemoryInOurWorkers(InMemorySource):
    """The same source, registered plainly: its tasks run in the Python workers that run ours."""

    @classmethod
    def name(cls) -> str:
        return "bench_in_memory_our_workers"
