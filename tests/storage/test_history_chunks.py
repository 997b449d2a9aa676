"""How the history reader fetches a row group (``history_reader``, "Reading"): the column chunks of
one of at most ``WHOLE_GROUP_BYTES`` whole, a larger one through a read buffer; either way every
message comes back exactly, each stored byte is fetched once, every fetch is counted (whichever of
``pa.PythonFile``'s reads Parquet makes: ``read`` into its buffer, ``read_buffer`` for a whole
chunk or a footer), and a parked cursor counts what its open row group holds, a read buffer at
least.

Over real Delta tables written by ``DeltaLog`` and real Parquet files."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from durable_streams_server.storage import history_reader
from durable_streams_server.storage.delta_log import DeltaLog
from durable_streams_server.storage.history_reader import HistoryReader
from durable_streams_server.storage.records import AppendHeader, Header, Record

UID = 10
MESSAGE = 64 * 1024
COUNT = 48  # (row groups of about 256 KiB: four messages each, twelve groups)


def _one_stream(tmp_path: Path, count: int = COUNT, size: int = MESSAGE) -> tuple[str, list[bytes], int]:
    """A flush of ``count`` incompressible messages of ``size`` bytes of one stream; the table's
    uri, the messages and the bytes of its data files."""
    delta = DeltaLog(str(tmp_path), {})
    messages = [os.urandom(size) for _ in range(count)]
    records: list[Record[Header]] = [
        Record(seq + 1, UID, AppendHeader(seq, 1_000 + seq, None, None, False), (payload,))
        for seq, payload in enumerate(messages)
    ]
    delta.commit(records, {UID: {"name": "v1/stream/s", "tail": count, "written_ms": 1_000}}, count)
    files = [Path(uri.removeprefix("file://")) for uri in DeltaTable(delta.uri).file_uris()]
    return delta.uri, messages, sum(file.stat().st_size for file in files)


def _catch_up(reader: HistoryReader, budget: int, count: int = COUNT) -> tuple[list[bytes], list[int]]:
    """Every message from 0 in reads of ``budget`` bytes, each resuming the last one's parked
    cursor; the messages and the parked bytes after each read."""
    taken: list[bytes] = []
    parked = []
    while len(taken) < count:
        table = reader.read(UID, len(taken), count, budget)
        assert table.num_rows >= 1
        assert table["seq"].to_pylist() == list(range(len(taken), len(taken) + table.num_rows))
        taken += table["data"].to_pylist()
        parked.append(reader.parked_bytes)
    return taken, parked


@pytest.mark.parametrize("whole", [True, False], ids=["whole-chunks", "read-buffer"])
def test_a_catch_up_reads_every_message_and_each_stored_byte_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: bool
) -> None:
    uri, messages, stored = _one_stream(tmp_path)
    if not whole:  # (every row group over the bound: the buffered read)
        monkeypatch.setattr(history_reader, "WHOLE_GROUP_BYTES", 0)
    reader = HistoryReader(uri, {})
    taken, parked = _catch_up(reader, budget=3 * MESSAGE)  # (reads stop inside row groups)
    assert taken == messages
    assert reader.plans == 1  # (one plan: every later read resumed the parked cursor)
    # Each byte of the data file once, plus the footer's read: pyarrow reads a file's last
    # 64 KiB for it, which holds the end of the last row group as well.
    assert stored * 0.95 < reader.bytes_read <= stored + 64 * 1024
    # A cursor parked inside a row group of four messages (256 KiB) counts a read buffer either
    # way: the least each parked cursor counts (each holds a file open), and its decoded rows.
    inside = max(parked[:-1])
    assert history_reader._BUFFER_BYTES <= inside < history_reader._BUFFER_BYTES + 4 * MESSAGE


@pytest.mark.parametrize("whole", [True, False], ids=["whole-chunks", "read-buffer"])
def test_a_parked_cursor_counts_the_row_group_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: bool
) -> None:
    """Messages of 1.5 MiB, a row group each, read one per read: the cursor parks with the next
    row group unopened or its row group open, and counts its chunks when read whole (more than
    a read buffer), else the buffer."""
    uri, messages, _ = _one_stream(tmp_path, count=6, size=3 * 512 * 1024)
    if not whole:
        monkeypatch.setattr(history_reader, "WHOLE_GROUP_BYTES", 0)
    reader = HistoryReader(uri, {})
    taken, parked = _catch_up(reader, budget=1, count=6)
    assert taken == messages
    if whole:
        assert 3 * 512 * 1024 < max(parked) < 2 * 3 * 512 * 1024
    else:
        assert max(parked) == history_reader._BUFFER_BYTES


def test_both_kinds_of_read_are_counted(tmp_path: Path) -> None:
    table_dir = tmp_path / "table"
    table_dir.mkdir()
    values = [os.urandom(100_000) for _ in range(8)]  # (incompressible: the file holds them whole)
    pq.write_table(pa.table({"data": pa.array(values, pa.binary())}), table_dir / "part.parquet")
    size = (table_dir / "part.parquet").stat().st_size
    reader = HistoryReader(str(table_dir), {})

    source = reader._open("part.parquet")
    first = source.read(1000)
    assert first[:4] == b"PAR1" and reader.bytes_read == 1000
    source.seek(0)
    assert source.read_buffer(4000).to_pybytes()[:4] == b"PAR1" and reader.bytes_read == 5000
    source.close()

    for buffer_size in (0, 1 << 16):  # (whole chunks through read_buffer; a buffered stream through read)
        before = reader.bytes_read
        read = pq.ParquetFile(reader._open("part.parquet"), buffer_size=buffer_size, pre_buffer=False).read()
        assert read["data"].to_pylist() == values
        assert 800_000 < reader.bytes_read - before <= size + 64 * 1024
