"""The history reader counts every byte it reads from a local table's data files, whichever of
``pa.PythonFile``'s reads the Parquet reader makes (``read`` or ``read_buffer``), and hands
it Arrow buffers, not ``bytes`` (one copy fewer of everything a catch-up reads)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from durable_streams_server.storage.data_files import open_local
from durable_streams_server.storage.history_reader import HistoryReader, _CountingFile


def test_reads_of_either_kind_count_and_the_parquet_reader_reads_through_them(tmp_path: Path) -> None:
    table_dir = tmp_path / "table"
    table_dir.mkdir()
    values = [os.urandom(100_000) for _ in range(8)]  # (incompressible: the file holds them whole)
    pq.write_table(pa.table({"data": pa.array(values, pa.binary())}), table_dir / "part.parquet")
    reader = HistoryReader(str(table_dir), {})

    source = reader._open("part.parquet")
    first = source.read(1000)
    assert first == b"PAR1" + first[4:] and reader.bytes_read == 1000
    source.seek(0)
    assert source.read_buffer(4000).to_pybytes()[:4] == b"PAR1" and reader.bytes_read == 5000
    source.close()
    counting = _CountingFile(open_local(str(table_dir) + "/", "part.parquet"), reader)
    assert isinstance(counting.read(10), pa.Buffer) and reader.bytes_read == 5010

    read = pq.ParquetFile(reader._open("part.parquet"), buffer_size=1 << 16, pre_buffer=False).read()
    assert read["data"].to_pylist() == values
    assert reader.bytes_read > 5000 + 800_000
