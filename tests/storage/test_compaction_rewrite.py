"""A bin rewritten within a small memory share writes exactly what a sort in memory writes.

The external sort (``sorted_runs``) against numpy's sort of everything; the dropping of
superseded state rows (``bin_rewrite.current_rows``) against ``newest_per_uid`` over the whole
bin, however the rows are cut into steps; and the bin of a real Delta table put in order
with a share far smaller than its rows (spilled runs, merges of merges) against the same bin
put in order in memory, then compacted.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from servers import MotoServer

from durable_streams_server.storage.bin_rewrite import BinRewrite, current_rows
from durable_streams_server.storage.compaction import CompactionConfig, Compactor
from durable_streams_server.storage.compaction_plan import plan_bins
from durable_streams_server.storage.data_files import DataFiles
from durable_streams_server.storage.delta_log import DeltaLog
from durable_streams_server.storage.records import AppendHeader, Header, Record, SnapshotHeader
from durable_streams_server.storage.sorted_runs import RunBuilder, SortMemory, keys_of, merged, sort_order
from durable_streams_server.storage.state_checkpoint import CHECKPOINT_APP_ID, newest_per_uid
from durable_streams_server.storage.table_schema import SCHEMA

KINDS = ["message", "snapshot", "state", "subscription"]


def _rows(count: int, seed: int) -> pa.Table:
    """Rows of every kind with many equal keys; ``data`` of 0 to 3,000 bytes names the row."""
    rng = random.Random(seed)
    rows: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for index in range(count):
        kind = rng.choice(KINDS)
        rows["stream"].append(f"s{index % 7}")
        rows["stream_uid"].append(rng.randrange(5))
        rows["kind"].append(kind)
        rows["seq"].append(rng.randrange(20))
        rows["ts"].append(index)
        rows["data"].append(f"{index:06d}".encode() * rng.randrange(500))
        rows["meta"].append(None if kind == "message" else f"m{index}")
        rows["lsn"].append(rng.randrange(30))
    return pa.table(rows, schema=SCHEMA)


def _key_tuples(table: pa.Table) -> list[tuple[int, ...]]:
    return list(zip(*(column.tolist() for column in keys_of(table)), strict=True))


def test_the_external_sort_orders_every_row_like_a_sort_in_memory(tmp_path: Path) -> None:
    rows = _rows(1500, seed=1)
    memory = SortMemory(run_bytes=100_000, batch_bytes=20_000, fan_in=3)
    builder = RunBuilder(SCHEMA, memory, tmp_path)
    for batch in rows.to_batches(max_chunksize=97):
        builder.add(batch)
    runs = builder.finish()
    assert len(runs) > 2 * memory.fan_in, "the rows must make enough runs for merges of merges"
    assert len(list(tmp_path.iterdir())) == len(runs)

    parts = list(merged(runs, memory, tmp_path))
    out = pa.concat_tables(parts)

    largest_row = 500 * 6 + 100
    assert max(part.nbytes for part in parts) <= memory.fan_in * (memory.batch_bytes + largest_row)
    expected = rows.take(pa.array(sort_order(keys_of(rows))))
    assert _key_tuples(out) == _key_tuples(expected)
    assert sorted(out.to_pylist(), key=repr) == sorted(rows.to_pylist(), key=repr)
    assert list(tmp_path.iterdir()) == [], "spill files are deleted once read"


def test_rows_that_fit_one_run_are_sorted_in_memory(tmp_path: Path) -> None:
    rows = _rows(500, seed=2)
    builder = RunBuilder(SCHEMA, SortMemory(run_bytes=1 << 30, batch_bytes=10_000, fan_in=4), tmp_path)
    for batch in rows.to_batches(max_chunksize=50):
        builder.add(batch)
    runs = builder.finish()
    assert len(runs) == 1 and runs[0].path is None
    assert list(tmp_path.iterdir()) == []
    out = pa.concat_tables(merged(runs, builder.memory, tmp_path))
    assert _key_tuples(out) == sorted(_key_tuples(rows))


def _reference_current(rows: pa.Table, checkpoint: int) -> list[dict[str, Any]]:
    """What compaction keeps, from the whole bin at once: every row but the state and
    subscription rows below the checkpoint or older than the newest of their uid."""
    is_state = pc.is_in(rows["kind"], value_set=pa.array(["state", "subscription"]))
    states = rows.filter(is_state)
    kept = pa.concat_tables(
        [rows.filter(pc.invert(is_state)), newest_per_uid(states.filter(pc.greater_equal(states["lsn"], checkpoint)))]
    )
    return kept.take(pa.array(sort_order(keys_of(kept)))).to_pylist()


def test_superseded_state_rows_are_dropped_however_the_steps_are_cut() -> None:
    rows = _rows(2000, seed=3)
    # Distinct LSNs per (kind, uid) so that "the newest" names one row; uid 4's all below 900,
    # so that the last checkpoint leaves none of its state rows.
    of_4 = np.asarray(rows["stream_uid"]) == 4
    lsn = np.arange(rows.num_rows) % 977
    lsn[of_4] = np.arange(np.count_nonzero(of_4))
    rows = rows.set_column(rows.schema.get_field_index("lsn"), "lsn", pa.array(lsn))
    ordered = rows.take(pa.array(sort_order(keys_of(rows))))
    rng = random.Random(4)
    for checkpoint in (0, 300, 900):
        bounds = sorted({0, ordered.num_rows, *(rng.randrange(ordered.num_rows) for _ in range(40))})
        steps = [ordered.slice(start, end - start) for start, end in itertools.pairwise(bounds)]
        kept = pa.concat_tables(current_rows(steps, checkpoint)).to_pylist()
        reference = _reference_current(rows, checkpoint)
        assert [(row["kind"], row["stream_uid"], row["seq"], row["lsn"]) for row in kept] == [
            (row["kind"], row["stream_uid"], row["seq"], row["lsn"]) for row in reference
        ]
        assert sorted(kept, key=repr) == sorted(reference, key=repr)
        assert len(kept) < rows.num_rows
        uid_4_states = [row for row in kept if row["stream_uid"] == 4 and row["kind"] in ("state", "subscription")]
        assert len(uid_4_states) == {0: 2, 300: 2, 900: 0}[checkpoint]


def _state(uid: int, tail: int) -> dict[str, Any]:
    return {"name": f"v1/stream/s{uid}", "tail": tail, "written_ms": 1000 + tail}


def _table_with_small_files(uri: str, options: dict[str, str] | None = None, flushes: int = 40) -> int:
    """``flushes`` flushes of 8 streams' messages (50 B to 20 KiB, incompressible), a snapshot
    in the middle, and a state checkpoint at three quarters; returns the bytes of the data files."""
    delta = DeltaLog(uri, options or {})
    rng = random.Random(5)
    lsn, tails = 0, dict.fromkeys(range(10, 18), 0)
    for flush in range(flushes):
        records: list[Record[Header]] = []
        for uid in tails:
            for _ in range(rng.randrange(1, 6)):
                lsn += 1
                records.append(
                    Record(
                        lsn,
                        uid,
                        AppendHeader(tails[uid], lsn, None, None, False),
                        (os.urandom(rng.randrange(50, 20_000)),),
                    )
                )
                tails[uid] += 1
        if flush == flushes // 2:
            lsn += 1
            records.append(Record(lsn, 12, SnapshotHeader(tails[12], "application/json", lsn), (b'{"folded":1}',)))
        delta.commit(records, {uid: _state(uid, tail) for uid, tail in tails.items()}, lsn)
        if flush == flushes * 3 // 4:
            delta.write_state_checkpoint()
    return sum(file.size for file in delta.file_spans())


def _key(row: dict[str, Any]) -> tuple[str, int, int, int]:
    return row["kind"], row["stream_uid"], row["seq"], row["lsn"]


def _batches_to_write(
    uri: str, memory_bytes: int, spill: Path, options: dict[str, str] | None = None
) -> list[list[dict[str, Any]]]:
    """What the rewrite of the table's one bin hands the Delta writer, batch by batch."""
    delta = DeltaLog(uri, options or {})
    (bin_,) = plan_bins(delta.file_spans(), 1 << 30, settled_bytes=1 << 29)
    table = DeltaTable(delta.uri, storage_options=options)
    rewrite = BinRewrite(DataFiles(delta.uri), memory_bytes, spill)
    checkpoint = table.transaction_version(CHECKPOINT_APP_ID) or 0
    with rewrite.ordered(table, bin_, checkpoint, row_group_bytes=1 << 20) as (batches, group_rows):
        written = [batch.to_pylist() for batch in batches]
    assert all(len(rows) == group_rows for rows in written[:-1])
    return written


@pytest.fixture(scope="module")
def small_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A table of many small files (built once: tests work on copies) and its data bytes."""
    path = tmp_path_factory.mktemp("small-files") / "table"
    return path, _table_with_small_files(str(path))


def test_a_bin_ordered_within_a_small_share_is_the_bin_ordered_in_memory(
    tmp_path: Path, small_files: tuple[Path, int]
) -> None:
    shutil.copytree(small_files[0], tmp_path / "table")
    stored = small_files[1]
    memory_bytes = 1 << 20
    assert stored > 4 * memory_bytes, "the bin must take more runs than a merge takes at once"

    small = _batches_to_write(str(tmp_path / "table"), memory_bytes, tmp_path / "spill")
    assert list((tmp_path / "spill").iterdir()) == [], "nothing spilled is left behind"
    large = _batches_to_write(str(tmp_path / "table"), 1 << 30, tmp_path / "spill")

    assert small == large
    assert len(small) > 1
    rows = [row for batch in small for row in batch]
    assert [_key(row) for row in rows] == sorted(_key(row) for row in rows)
    assert sum(row["kind"] == "snapshot" for row in rows) == 1
    states = [row for row in rows if row["kind"] == "state"]
    assert sorted(row["stream_uid"] for row in states) == list(range(10, 18)), "one state row per stream"


def test_a_pass_within_a_small_share_writes_every_current_row_once(
    tmp_path: Path, small_files: tuple[Path, int]
) -> None:
    shutil.copytree(small_files[0], tmp_path / "table")
    expected = [
        row for batch in _batches_to_write(str(tmp_path / "table"), 1 << 30, tmp_path / "spill") for row in batch
    ]
    spill = tmp_path / "spill"
    config = CompactionConfig(target_file_bytes=1 << 30, memory_bytes=1 << 20, spill_dir=spill)

    report = Compactor(DeltaLog(str(tmp_path / "table"), {}), config).run_once([], {})

    assert (report.files_before, report.bins, report.files_after) == (41, 1, 1)
    assert list(spill.iterdir()) == []
    rows = DeltaTable(f"{tmp_path}/table/streams").to_pyarrow_table().cast(SCHEMA).to_pylist()
    assert sorted(rows, key=_key) == expected


def test_a_bin_on_an_object_store_is_read_component_by_component_and_compacted(
    tmp_path: Path, moto: MotoServer
) -> None:
    moto.create_bucket("compaction")
    uri, options = "s3://compaction/rewrite", moto.storage_options()
    stored = _table_with_small_files(uri, options, flushes=20)
    assert stored > 4 * (1 << 20)
    expected = [row for batch in _batches_to_write(uri, 1 << 30, tmp_path / "spill", options) for row in batch]
    assert [row for batch in _batches_to_write(uri, 1 << 20, tmp_path / "spill", options) for row in batch] == expected

    config = CompactionConfig(target_file_bytes=1 << 30, memory_bytes=1 << 20, spill_dir=tmp_path / "spill")
    report = Compactor(DeltaLog(uri, options), config).run_once([], {})

    assert (report.files_before, report.bins, report.files_after) == (21, 1, 1)
    assert list((tmp_path / "spill").iterdir()) == []
    rows = DeltaTable(f"{uri}/streams", storage_options=options).to_pyarrow_table().cast(SCHEMA).to_pylist()
    assert sorted(rows, key=_key) == expected
