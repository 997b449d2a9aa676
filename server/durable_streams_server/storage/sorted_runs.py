"""Sorting more rows than a memory share holds: sorted runs spilled to local files, then merged.

Compaction rewrites a bin of files as one file in key order ``(kind, stream_uid, seq, lsn)``
(``compaction``). The rows of a bin may take many times the memory a pass may use (a bin is
cut by file bytes; decoded, small or compressible messages take several times that), so they
are sorted as external sorts do, within ``SortMemory``:

1. **Runs** (``RunBuilder``). Rows arrive in batches, file by file. They are gathered until
   they take ``run_bytes``, made contiguous, sorted, and written to a spill file as Arrow IPC
   batches of about ``batch_bytes``, cut by the rows' own sizes (a batch holds one large
   message or many small ones). Rows that all fit in one run are never spilled: that run
   stays in memory.
2. **Merge** (``merged``). Each run is read back one batch at a time. A step takes, from the
   batch at the head of every run, the rows up to the smallest of those batches' last keys
   (the *frontier*): no row still unread in any run sorts before the frontier, so the rows
   taken, sorted, are the next ones in order; the run whose last key was the frontier moves
   on to its next batch, so every step consumes at least one batch. With more than
   ``fan_in`` runs, groups of runs are first merged into longer runs (spilled again), so a
   merge holds at most ``fan_in`` batches however many rows the bin has.

Memory: about twice ``run_bytes`` while a run is made contiguous and sorted (plus 48 bytes of
keys and indices per row, counted in ``run_bytes``), and about ``3 * fan_in * batch_bytes``
while merging (one batch per run, a step's rows, their sorted copy). Ties (equal keys) keep
no particular order: rows with equal keys are copies of one another (``compaction``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .table_schema import KIND_MESSAGE, KIND_SNAPSHOT, KIND_STATE, KIND_SUBSCRIPTION

KINDS = sorted([KIND_MESSAGE, KIND_SNAPSHOT, KIND_STATE, KIND_SUBSCRIPTION])
"""Every row kind, in the order their names sort: a kind's rank orders rows as its name does."""
_KIND_VALUES = pa.array(KINDS)
_KEY_BYTES = 48
"""Bytes per row of a run's sort keys and order (four int64 columns, the rank, the indices)."""

Keys = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""A table's sort keys as arrays: kind rank, stream_uid, seq, lsn."""
Key = tuple[int, int, int, int]
_NONE = np.zeros(0, dtype=np.int64)
_NAMES = itertools.count()
"""Spill files are named by this counter (its ``next`` is atomic in CPython)."""


@dataclass(frozen=True, slots=True)
class SortMemory:
    """How a sort spends its memory share (see the module docstring)."""

    run_bytes: int
    batch_bytes: int
    fan_in: int

    @classmethod
    def of(cls, memory_bytes: int) -> SortMemory:
        """The parts of a share of ``memory_bytes``: a quarter per run (twice that at its
        sort), batches of a 64th (16 KiB to 1 MiB), as many runs per merge as a sixth holds."""
        batch_bytes = min(1 << 20, max(16 << 10, memory_bytes // 64))
        return cls(max(1, memory_bytes // 4), batch_bytes, max(2, memory_bytes // (6 * batch_bytes)))


def keys_of(rows: pa.Table | pa.RecordBatch) -> Keys:
    """The sort keys of ``rows`` (a row of an unknown kind is an error: it has no place)."""
    rank = pc.index_in(rows["kind"], value_set=_KIND_VALUES)
    if rank.null_count:
        unknown = pc.unique(pc.filter(rows["kind"], pc.is_null(rank))).to_pylist()
        raise ValueError(f"rows of unknown kind {unknown!r}; kinds are {KINDS}")
    return (
        np.asarray(rank, dtype=np.int64),
        np.asarray(rows["stream_uid"], dtype=np.int64),
        np.asarray(rows["seq"], dtype=np.int64),
        np.asarray(rows["lsn"], dtype=np.int64),
    )


def sort_order(keys: Keys) -> np.ndarray:
    rank, uid, seq, lsn = keys
    return np.lexsort((lsn, seq, uid, rank))


def count_through(keys: Keys, start: int, frontier: Key) -> int:
    """How many rows from ``start`` of sorted ``keys`` sort at or before ``frontier``."""
    rank, uid, seq, lsn = (column[start:] for column in keys)
    fr, fu, fs, fl = frontier
    through = (rank < fr) | ((rank == fr) & ((uid < fu) | ((uid == fu) & ((seq < fs) | ((seq == fs) & (lsn <= fl))))))
    return int(np.count_nonzero(through))


def row_sizes(rows: pa.Table | pa.RecordBatch) -> np.ndarray:
    """Bytes each row takes in memory (values and offsets; validity bits left out)."""
    sizes = np.zeros(rows.num_rows, dtype=np.int64)
    for field, column in zip(rows.schema, rows.columns, strict=True):
        if pa.types.is_binary(field.type) or pa.types.is_string(field.type):
            chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
            sizes += np.concatenate([_value_lengths(chunk) for chunk in chunks] or [_NONE]) + 4
        else:
            sizes += field.type.bit_width // 8
    return sizes


def _value_lengths(array: pa.Array) -> np.ndarray:
    """The byte length of each value of a binary or string array (0 for a null), from its offsets."""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset : array.offset + len(array) + 1]
    return np.diff(offsets).astype(np.int64)


def cuts(sizes: np.ndarray, batch_bytes: int) -> list[int]:
    """Boundaries that cut rows of ``sizes`` into batches of about ``batch_bytes`` (at least a row)."""
    ends = np.cumsum(sizes)
    bounds = [0]
    while bounds[-1] < len(sizes):
        start = bounds[-1]
        base = int(ends[start - 1]) if start else 0
        bounds.append(max(start + 1, int(np.searchsorted(ends, base + batch_bytes, side="right"))))
    bounds[-1] = min(bounds[-1], len(sizes))
    return bounds


def _sliced(rows: pa.Table, batch_bytes: int) -> Iterator[pa.Table]:
    """``rows`` in consecutive slices of about ``batch_bytes``."""
    bounds = cuts(row_sizes(rows), batch_bytes)
    for start, end in itertools.pairwise(bounds):
        yield rows.slice(start, end - start)


class Run:
    """Sorted rows, read once: in memory (made as they are read), or in a spill file read back
    one batch at a time and deleted once read."""

    def __init__(self, schema: pa.Schema, *, rows: Iterator[pa.Table] | None = None, path: Path | None = None) -> None:
        self.schema = schema
        self._rows = rows
        self.path = path

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self._rows is not None:
            rows, self._rows = self._rows, None
            for table in rows:
                yield from table.to_batches()
            return
        assert self.path is not None, "a run is read once"
        try:
            with pa.OSFile(str(self.path), "rb") as source, pa.ipc.open_stream(source) as reader:
                yield from reader
        finally:
            self.path.unlink(missing_ok=True)
            self.path = None


class _Spill:
    """Spill files in one directory, each written batch by batch."""

    def __init__(self, directory: Path, schema: pa.Schema, batch_bytes: int) -> None:
        self.directory = directory
        self.schema = schema
        self.batch_bytes = batch_bytes

    def write(self, tables: Iterable[pa.Table]) -> Run:
        path = self.directory / f"run-{next(_NAMES)}.arrows"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, self.schema) as writer:
            for table in tables:
                for piece in _sliced(table, self.batch_bytes):
                    writer.write_table(piece)
        return Run(self.schema, path=path)


class RunBuilder:
    """Rows in, sorted runs out (step 1 of the module docstring)."""

    def __init__(self, schema: pa.Schema, memory: SortMemory, spill_dir: Path) -> None:
        self.schema = schema
        self.memory = memory
        self._spill = _Spill(spill_dir, schema, memory.batch_bytes)
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self.runs: list[Run] = []
        self.rows = 0
        self.row_bytes = 0
        """Rows added, and their bytes (``row_sizes``: however they came in batches)."""

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes + _KEY_BYTES * batch.num_rows
        self.rows += batch.num_rows
        self.row_bytes += int(row_sizes(batch).sum())
        if self._pending_bytes >= self.memory.run_bytes:
            self.runs.append(self._spill.write(self._sorted()))

    def finish(self) -> list[Run]:
        """The runs; the last rows stay in memory if they are the only run."""
        if self._pending:
            sorted_rows = self._sorted()
            self.runs.append(Run(self.schema, rows=sorted_rows) if not self.runs else self._spill.write(sorted_rows))
        return self.runs

    def _sorted(self) -> Iterator[pa.Table]:
        """The pending rows sorted, one slice of about ``batch_bytes`` at a time."""
        rows = pa.Table.from_batches(self._pending, schema=self.schema).combine_chunks()
        self._pending, self._pending_bytes = [], 0
        order = sort_order(keys_of(rows))
        bounds = cuts(row_sizes(rows).take(order), self.memory.batch_bytes)
        for start, end in itertools.pairwise(bounds):
            yield rows.take(pa.array(order[start:end]))


class _Head:
    """A run's current batch, its keys, and how far the merge has taken it."""

    def __init__(self, run: Run) -> None:
        self._batches = run.batches()
        self.batch: pa.RecordBatch | None = None
        self.keys: Keys = (_NONE, _NONE, _NONE, _NONE)
        self.start = 0
        self._next()

    def _next(self) -> None:
        self.batch, self.start = next(self._batches, None), 0
        while self.batch is not None and self.batch.num_rows == 0:
            self.batch = next(self._batches, None)
        if self.batch is not None:
            self.keys = keys_of(self.batch)

    @property
    def last(self) -> Key:
        rank, uid, seq, lsn = (int(column[-1]) for column in self.keys)
        return rank, uid, seq, lsn

    def take_through(self, frontier: Key) -> pa.RecordBatch:
        """The rows up to ``frontier`` not yet taken; moves on to the next batch when all are."""
        assert self.batch is not None
        count = count_through(self.keys, self.start, frontier)
        taken = self.batch.slice(self.start, count)
        self.start += count
        if self.start == self.batch.num_rows:
            self._next()
        return taken

    def rest(self) -> Iterator[pa.RecordBatch]:
        """Everything not yet taken (the merge's last run)."""
        while self.batch is not None:
            yield self.batch.slice(self.start)
            self._next()


def _merged_once(runs: Sequence[Run]) -> Iterator[pa.Table]:
    """Step 2 of the module docstring over at most ``fan_in`` runs."""
    heads = [head for head in map(_Head, runs) if head.batch is not None]
    while len(heads) > 1:
        frontier = min(head.last for head in heads)
        pieces = [head.take_through(frontier) for head in heads]
        step = pa.Table.from_batches([piece for piece in pieces if piece.num_rows])
        yield step.take(pa.array(sort_order(keys_of(step))))
        heads = [head for head in heads if head.batch is not None]
    for head in heads:
        for batch in head.rest():
            yield pa.Table.from_batches([batch])


def merged(runs: Sequence[Run], memory: SortMemory, spill_dir: Path) -> Iterator[pa.Table]:
    """All rows of ``runs`` in key order, as tables of a bounded size (see the module docstring)."""
    if not runs:
        return
    spill = _Spill(spill_dir, runs[0].schema, memory.batch_bytes)
    runs = list(runs)
    while len(runs) > memory.fan_in:
        runs = [
            spill.write(_merged_once(runs[start : start + memory.fan_in]))
            for start in range(0, len(runs), memory.fan_in)
        ]
    yield from _merged_once(runs)
