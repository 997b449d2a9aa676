"""The floor of ``spark_bench.py``'s latency: a Python streaming source that does nothing but hand
Spark the lines a local file has gained.

``spark.readStream.format("bench_file_lines").option("path", P)``: the bench appends one JSON
message per line to ``P`` (one ``write`` each, flushed); the source's offset is the byte
position after the file's last whole line, a batch's one partition the bytes since the previous
batch, and its rows those lines (``value``). So a batch costs what every Python streaming source
costs at this trigger (Spark's micro-batch planning, the Python data source's round trips for
``latestOffset`` and ``partitions``, a task's ``read`` in a Python worker, the ``foreachBatch``)
and nothing of a server's: the least append → visible any Python source can reach here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

SCHEMA = "value string"


class ByteRange(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


class FileLinesReader(DataSourceStreamReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def initialOffset(self) -> dict[str, int]:
        return {"bytes": 0}

    def latestOffset(self) -> dict[str, int]:
        """The position after the file's last whole line (a line being written is left for later)."""
        with open(self.path, "rb") as file:
            data = file.read()
        return {"bytes": data.rfind(b"\n") + 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return [ByteRange(start["bytes"], end["bytes"])] if end["bytes"] > start["bytes"] else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ByteRange)
        with open(self.path, "rb") as file:
            file.seek(partition.start)
            lines = file.read(partition.end - partition.start).decode().splitlines()
        yield pa.RecordBatch.from_arrays([pa.array(lines, pa.string())], names=["value"])

    def commit(self, end: dict[str, int]) -> None:
        pass


class FileLinesSource(DataSource):
    """``spark.readStream.format("bench_file_lines").option("path", P)``: streaming reads only."""

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return FileLinesReader(self.options["path"])

    def schema(self) -> str:
        return SCHEMA

    @classmethod
    def name(cls) -> str:
        return "bench_file_lines"


class FileLines:
    """The bench's side: appends one line per message (``append``), as a server's append would."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, line: bytes) -> None:
        os.write(self._fd, line + b"\n")

    def close(self) -> None:
        os.close(self._fd)
