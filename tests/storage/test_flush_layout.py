"""The layout of a flush file on a real Delta table (``commit_rows.clustered``).

Messages first, by stream and sequence, in row groups of about ``FLUSH_ROW_GROUP_BYTES`` of
message bytes; the state rows after them in at most ``MAX_OTHER_ROW_GROUPS`` row groups, so
that state scans skip message row groups and history reads skip state row groups by their
statistics, and footers stay small however many streams a flush touches.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from durable_streams_server.storage.commit_rows import FLUSH_ROW_GROUP_BYTES, MAX_OTHER_ROW_GROUPS
from durable_streams_server.storage.delta_log import DeltaLog
from durable_streams_server.storage.footers import FooterCache
from durable_streams_server.storage.history_reader import HistoryReader
from durable_streams_server.storage.records import AppendHeader, Header, Record
from durable_streams_server.storage.row_group_streams import RowGroupStreams


def _state(uid: int, tail: int) -> dict[str, Any]:
    return {"name": f"v1/stream/s{uid}", "tail": tail, "written_ms": 1000 + tail}


def _flush(tmp_path: Path, streams: int, messages: int, size: int) -> tuple[DeltaLog, dict[int, list[bytes]]]:
    """One flush of ``messages`` messages of ``size`` bytes to each of ``streams`` streams,
    interleaved as they would arrive (uids 10, 11, ...)."""
    delta = DeltaLog(str(tmp_path), {})
    sent: dict[int, list[bytes]] = {10 + i: [] for i in range(streams)}
    records: list[Record[Header]] = []
    lsn = 0
    for seq in range(messages):
        for uid in sent:
            lsn += 1
            payload = os.urandom(size)  # (incompressible: no dictionary or run-length encoding)
            sent[uid].append(payload)
            records.append(Record(lsn, uid, AppendHeader(seq, 1_000 + lsn, None, None, False), (payload,)))
    delta.commit(records, {uid: _state(uid, messages) for uid in sent}, lsn)
    return delta, sent


def _row_groups(tmp_path: Path) -> list[tuple[str, str, int, int, int, int]]:
    """(kind min, kind max, uid min, uid max, rows, data bytes) of each row group of the one data file."""
    files = DeltaTable(f"{tmp_path}/streams").file_uris()
    assert len(files) == 1
    metadata = pq.ParquetFile(files[0]).metadata
    names = metadata.schema.names
    kind, uid, data = names.index("kind"), names.index("stream_uid"), names.index("data")
    groups = []
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        kinds, uids = group.column(kind).statistics, group.column(uid).statistics
        size = group.column(data).total_uncompressed_size
        groups.append((kinds.min, kinds.max, uids.min, uids.max, group.num_rows, size))
    return groups


def test_messages_first_by_stream_then_states(tmp_path: Path) -> None:
    _flush(tmp_path, streams=40, messages=1, size=64 * 1024)
    groups = _row_groups(tmp_path)
    kinds = [(g[0], g[1]) for g in groups]
    assert kinds == sorted(kinds)  # in file order: message row groups, at most one mixed, states
    assert sum(1 for g in groups if g[0] != g[1]) <= 1
    message_groups = [g for g in groups if g[:2] == ("message", "message")]
    assert len(message_groups) >= 8
    # Each holds a few neighbouring streams (four 64 KiB messages), not a spread of the flush.
    assert all(g[3] - g[2] < g[4] <= 4 for g in message_groups)
    assert all(g[5] <= 2 * FLUSH_ROW_GROUP_BYTES for g in message_groups)


def test_the_states_of_many_streams_take_few_row_groups(tmp_path: Path) -> None:
    _flush(tmp_path, streams=500, messages=1, size=64 * 1024)
    groups = _row_groups(tmp_path)
    with_states = [g for g in groups if g[1] == "state"]
    assert len(with_states) <= MAX_OTHER_ROW_GROUPS + 1  # (+ the one they may share with the last messages)
    assert sum(g[4] for g in groups if g[0] == g[1] == "state") >= 500 - max(g[4] for g in groups)


def test_small_messages_make_row_groups_of_about_the_target_bytes(tmp_path: Path) -> None:
    _flush(tmp_path, streams=4, messages=5_000, size=100)
    groups = _row_groups(tmp_path)
    message_groups = [g for g in groups if g[:2] == ("message", "message")]
    assert len(message_groups) >= 2
    assert all(g[5] <= 2 * FLUSH_ROW_GROUP_BYTES for g in message_groups)
    assert all(g[5] >= FLUSH_ROW_GROUP_BYTES // 2 for g in message_groups[:-1])


def test_messages_are_stored_in_plain_pages(tmp_path: Path) -> None:
    """The ``data`` column has no dictionary (``delta_log._PAYLOAD_COLUMNS``): a read copies each
    message once, from its page into the column read, not through a decoded dictionary first."""
    _flush(tmp_path, streams=4, messages=20, size=64 * 1024)
    metadata = pq.ParquetFile(DeltaTable(f"{tmp_path}/streams").file_uris()[0]).metadata
    data = metadata.schema.names.index("data")
    for index in range(metadata.num_row_groups):
        column = metadata.row_group(index).column(data)
        assert column.dictionary_page_offset is None
        assert "RLE_DICTIONARY" not in column.encodings and "PLAIN" in column.encodings


def test_history_reads_decode_only_the_row_groups_of_their_stream(tmp_path: Path) -> None:
    delta, sent = _flush(tmp_path, streams=40, messages=2, size=64 * 1024)
    reader = HistoryReader(delta.uri, {})
    for uid in (10, 30, 49):
        before = reader.bytes_read
        table = reader.read(uid, 0, 2, max_bytes=1 << 30)
        assert table["data"].to_pylist() == sent[uid]
        assert table["seq"].to_pylist() == [0, 1]
        footer = pq.ParquetFile(DeltaTable(delta.uri).file_uris()[0]).metadata.serialized_size
        # Its two messages are in one or two row groups of about 256 KiB, plus the footer
        # the first read fetches: far less than the 5 MiB file.
        assert reader.bytes_read - before <= 4 * FLUSH_ROW_GROUP_BYTES + footer + 8


def test_footer_cache_is_bounded_by_footer_bytes(tmp_path: Path) -> None:
    delta, _ = _flush(tmp_path, streams=40, messages=1, size=1024)
    path = DeltaTable(delta.uri).file_uris()[0]
    size = pq.ParquetFile(path).metadata.serialized_size
    opened: list[str] = []

    def open_file(name: str) -> pa.NativeFile:
        opened.append(name)
        return pa.OSFile(path)

    cache = FooterCache(open_file, max_bytes=3 * size)
    for name in ("a", "b", "c", "d", "a"):  # the same file's footer under five names
        assert cache.get(name).serialized_size == size
    assert cache.nbytes == 3 * size  # "a" was dropped for "d", least recently used first
    assert opened == ["a", "b", "c", "d", "a"]
    assert cache.get("d").num_rows == 80 and opened[-1] == "a"  # "d" still held


def test_footer_cache_counts_decoded_row_group_statistics(tmp_path: Path) -> None:
    """``row_groups`` decodes a footer's statistics once; their bytes count against the bound
    at once (the least recently used footer goes when they pass it), and they agree with the
    footer's own statistics."""
    delta, _ = _flush(tmp_path, streams=40, messages=1, size=1024)
    path = DeltaTable(delta.uri).file_uris()[0]
    metadata = pq.ParquetFile(path).metadata
    size = metadata.serialized_size
    cache = FooterCache(lambda name: pa.OSFile(path), max_bytes=2 * size)
    cache.get("a")
    stats = cache.row_groups("b")
    assert stats is cache.row_groups("b")  # decoded once
    assert cache.nbytes == size + stats.nbytes  # "a" dropped: two footers and b's statistics are over the bound
    names = metadata.schema.names
    seq = names.index("seq")
    assert [int(v) for v in stats.seq_max] == [
        metadata.row_group(i).column(seq).statistics.max for i in range(metadata.num_row_groups)
    ]


def test_row_group_statistics_say_which_groups_hold_only_messages(tmp_path: Path) -> None:
    """``only_messages`` (reads skip the kind test there) is true exactly where the footer's ``kind``
    statistics are ``message`` to ``message``; ``group_bytes`` is each group's whole size."""
    delta, _ = _flush(tmp_path, streams=40, messages=1, size=64 * 1024)
    path = DeltaTable(delta.uri).file_uris()[0]
    metadata = pq.ParquetFile(path).metadata
    stats = FooterCache(lambda name: pa.OSFile(path), max_bytes=1 << 20).row_groups("f")
    kinds = [g[:2] for g in _row_groups(tmp_path)]
    assert [bool(v) for v in stats.only_messages] == [kind == ("message", "message") for kind in kinds]
    assert 8 <= sum(stats.only_messages) < len(kinds)  # (the states' groups, and a mixed one, are not)
    assert [int(v) for v in stats.group_bytes] == [
        metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)
    ]


def _spread_flushes(tmp_path: Path, flushes: int, streams: int) -> tuple[DeltaLog, dict[int, bytes]]:
    """``flushes`` flush files whose uid ranges all span every stream (uids 10, 11, ...), each
    stream's one message in one of them: the layout of appends spread over many streams."""
    delta = DeltaLog(str(tmp_path), {})
    sent = {10 + i: os.urandom(100) for i in range(streams)}
    lsn = 0
    for flush in range(flushes):
        records: list[Record[Header]] = []
        for uid, payload in sent.items():
            if uid % flushes == flush:
                lsn += 1
                records.append(Record(lsn, uid, AppendHeader(0, 1_000 + lsn, None, None, False), (payload,)))
        delta.commit(records, {}, lsn)
    return delta, sent


def test_a_read_decodes_only_the_row_groups_that_hold_its_stream(tmp_path: Path) -> None:
    """Every flush file's statistics allow every stream; after a row group's uids are learned
    (its first read, ``row_group_streams``), a read of a stream decodes the one that holds it."""
    delta, sent = _spread_flushes(tmp_path, flushes=6, streams=1_200)
    files = DeltaTable(delta.uri).file_uris()
    assert len(files) == 6 and all(pq.ParquetFile(path).metadata.num_row_groups == 1 for path in files)
    reader = HistoryReader(delta.uri, {})
    assert all(reader.read(uid, 0, 1, max_bytes=1 << 20)["data"].to_pylist() == [data] for uid, data in sent.items())
    assert reader.streams.learned == 6  # each row group's uids decoded once
    largest = max(os.path.getsize(path) for path in files)
    for uid in (11, 500, 1_209):
        before = reader.bytes_read
        assert reader.read(uid, 0, 1, max_bytes=1 << 20)["data"].to_pylist() == [sent[uid]]
        assert reader.bytes_read - before <= largest  # one row group, not up to six
    assert reader.streams.learned == 6


def test_row_groups_whose_streams_are_not_kept_are_read_as_before(tmp_path: Path) -> None:
    """A bound too small for any row group's uids: nothing is kept, every read learns again, and
    every stream still reads back whole."""
    delta, sent = _spread_flushes(tmp_path, flushes=3, streams=300)
    reader = HistoryReader(delta.uri, {})
    reader.streams = RowGroupStreams(max_bytes=64)
    assert all(reader.read(uid, 0, 1, max_bytes=1 << 20)["data"].to_pylist() == [data] for uid, data in sent.items())
    assert reader.streams.nbytes == 0 and reader.streams.learned >= len(sent)  # (3 if kept)
