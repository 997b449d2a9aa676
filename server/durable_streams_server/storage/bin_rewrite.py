"""One compaction bin's rows, read and put in order within the pass's memory share.

A bin (``compaction_plan``) is rewritten as one file sorted by ``(kind, stream_uid, seq,
lsn)``. Its rows never need to be in memory at once:

- **Reading**, file by file in batches of about the sort's batch size: a local table's files
  with pyarrow (``data_files``); on an object store, a Delta scan per component of the bin
  (a component's LSN span matches exactly its files' rows, ``compaction_plan``), so delta-rs
  reads one component's files at a time.
- **Ordering** by an external sort (``sorted_runs``): runs of a quarter of the share, spilled
  to ``spill_dir`` when there is more than one, merged a bounded step at a time.
- **Dropping** on the way to the writer the ``state``/``subscription`` rows recovery will
  never take (``current_rows``): those below the state checkpoint's LSN and those a newer row
  of the bin replaces. The sorted order puts all rows of one ``(kind, stream_uid)`` side by
  side; the last such group of a step is held back until the next step shows where it ends.

So a pass holds about its share (``CompactionConfig.memory_bytes``) whatever the bin's size,
plus what the Delta writer buffers (a row group being encoded and the file's upload parts).
The rows written are those a sort of the whole bin in memory would write, in the same order.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from .compaction_plan import Bin, components
from .data_files import DataFiles
from .sorted_runs import KINDS, Keys, RunBuilder, SortMemory, keys_of, merged
from .table_schema import KIND_STATE, KIND_SUBSCRIPTION, SCHEMA, plain_batch

_SUPERSEDED_KINDS = np.array([KINDS.index(KIND_STATE), KINDS.index(KIND_SUBSCRIPTION)])
"""Ranks of the kinds whose rows a newer row of the same uid replaces."""
_SPILL_PREFIX = "bin-"


class BinRewrite:
    """Reads bins and orders their rows (see the module docstring)."""

    def __init__(self, files: DataFiles, memory_bytes: int, spill_dir: Path | None) -> None:
        self._files = files
        self.memory = SortMemory.of(memory_bytes)
        self._spill_dir = spill_dir
        if spill_dir is not None:  # a dedicated directory: what a killed pass left goes
            spill_dir.mkdir(parents=True, exist_ok=True)
            for stale in spill_dir.glob(_SPILL_PREFIX + "*"):
                shutil.rmtree(stale, ignore_errors=True)

    @contextlib.contextmanager
    def ordered(
        self, table: DeltaTable, bin_: Bin, checkpoint: int, row_group_bytes: int
    ) -> Iterator[tuple[Iterator[pa.RecordBatch], int]]:
        """The bin's rows to write, in order, in batches of one row group each, and the rows
        per row group that make row groups of about ``row_group_bytes``: read (and spilled)
        on entry, merged as the batches are consumed, spill files removed on exit."""
        with tempfile.TemporaryDirectory(prefix=_SPILL_PREFIX, dir=self._spill_dir) as spill:
            builder = RunBuilder(SCHEMA, self.memory, Path(spill))
            for batch in self._read(table, bin_):
                builder.add(batch)
            runs = builder.finish()
            row_bytes = max(1, builder.row_bytes // max(1, builder.rows))
            group_rows = min(1 << 20, max(1, row_group_bytes // row_bytes))
            rows = current_rows(merged(runs, self.memory, Path(spill)), checkpoint)
            yield regrouped(rows, group_rows), group_rows

    def _read(self, table: DeltaTable, bin_: Bin) -> Iterator[pa.RecordBatch]:
        if self._files.local:
            yield from self._files.batches(sorted(bin_.paths), SCHEMA, self.memory.batch_bytes)
            return
        for component in components(bin_.files):
            lo, hi = min(file.lo for file in component), max(file.hi for file in component)
            scan = table.scan(predicate=f"lsn >= {lo} AND lsn <= {hi}")
            for batch in pa.RecordBatchReader.from_stream(scan):
                yield plain_batch(batch)


def regrouped(parts: Iterable[pa.Table], size: int) -> Iterator[pa.RecordBatch]:
    """The rows of ``parts`` in batches of exactly ``size`` rows (the last one fewer).

    The Delta writer passes whole batches on, but not in their order (delta-rs spreads them
    over its worker partitions, one writer draining them all), and cuts row groups every
    ``size`` rows: batches of one row group each keep every row group one sorted slice of
    the bin, so readers, which order a file's row groups by their statistics, find each
    stream's rows together."""
    pending: list[pa.Table] = []
    count = 0
    for part in parts:
        while part.num_rows:
            taken = min(size - count, part.num_rows)
            pending.append(part.slice(0, taken))
            part, count = part.slice(taken), count + taken
            if count == size:
                yield _one_batch(pending)
                pending, count = [], 0
    if pending:
        yield _one_batch(pending)


def _one_batch(tables: list[pa.Table]) -> pa.RecordBatch:
    batches: list[pa.RecordBatch] = pa.concat_tables(tables).combine_chunks().to_batches()
    return batches[0]


def current_rows(tables: Iterable[pa.Table], checkpoint: int) -> Iterator[pa.Table]:
    """All rows of a bin, given in key order, without the ``state``/``subscription`` rows
    recovery will never take: those below ``checkpoint`` (the state checkpoint's LSN), and
    all but the newest (highest LSN) of each ``(kind, stream_uid)``."""
    held: pa.Table | None = None
    for part in tables:
        table = part if held is None else pa.concat_tables([held, part])
        held = None
        if table.num_rows == 0:
            continue
        keys = keys_of(table)
        end = _open_group_start(keys)
        if end < table.num_rows:  # may go on in the next part
            held = table.slice(end)
            table, keys = table.slice(0, end), (keys[0][:end], keys[1][:end], keys[2][:end], keys[3][:end])
        if table.num_rows:
            yield _newest_kept(table, keys, checkpoint)
    if held is not None:
        yield _newest_kept(held, keys_of(held), checkpoint)


def _open_group_start(keys: Keys) -> int:
    """Where the last ``(kind, stream_uid)`` group of superseded kinds starts (the length of
    the table when the last row is of another kind)."""
    rank, uid = keys[0], keys[1]
    if rank[-1] not in _SUPERSEDED_KINDS:
        return len(rank)
    other = np.flatnonzero((rank != rank[-1]) | (uid != uid[-1]))
    return int(other[-1]) + 1 if len(other) else 0


def _newest_kept(table: pa.Table, keys: Keys, checkpoint: int) -> pa.Table:
    """``table`` (whole groups) without the rows ``current_rows`` drops."""
    rank, uid, _, lsn = keys
    superseding = np.isin(rank, _SUPERSEDED_KINDS)
    if not superseding.any():
        return table
    eligible = superseding & (lsn >= checkpoint)
    starts = np.ones(len(rank), dtype=bool)
    starts[1:] = (rank[1:] != rank[:-1]) | (uid[1:] != uid[:-1])
    group = np.cumsum(starts) - 1
    score = np.where(eligible, lsn, np.iinfo(np.int64).min)
    newest = np.maximum.reduceat(score, np.flatnonzero(starts))
    chosen = np.flatnonzero(eligible & (score == newest[group]))
    _, first = np.unique(group[chosen], return_index=True)  # one of equal rows (copies of one another)
    keep = ~superseding
    keep[chosen[first]] = True
    return table.filter(pa.array(keep))
