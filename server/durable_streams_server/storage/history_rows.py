"""The rows a history read decoded (``history_reader``): a stream's messages in a batch split
into contiguous runs (``add_runs``), and how many of them a read's byte budget takes
(``within_budget``).

Both run once per batch a read decodes, and a catch-up of large messages decodes a batch per
message, so neither calls Arrow kernels it can do without: each call costs tens of
microseconds whatever its rows.
"""

from __future__ import annotations

import itertools
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .message_batch import value_bytes
from .table_schema import KIND_MESSAGE, SCHEMA

HISTORY_COLUMNS = ["seq", "ts", "data", "meta"]
HISTORY_SCHEMA = pa.schema([SCHEMA.field(name).with_nullable(True) for name in HISTORY_COLUMNS])
"""What a history read returns (nullable: files delta-rs rewrote may say so)."""
_HISTORY_TYPES = [field.type for field in HISTORY_SCHEMA]


def add_runs(runs: dict[int, pa.Table], batch: pa.RecordBatch, uid: int, start: int, *, only_messages: bool) -> None:
    """Split ``uid``'s messages from ``start`` in a batch into contiguous runs.

    The rows are tested in numpy, their kinds only where the row group's statistics leave a
    doubt (``only_messages``), and the columns take ``HISTORY_SCHEMA``'s nullability without a
    cast: a batch of one 1 MiB message took ~85 µs here against ~340 with a kernel a test
    (outside the server, on a machine twice as slow as the benchmarks of record)."""
    seqs = batch["seq"].to_numpy(zero_copy_only=False)  # (no copy: the column has no nulls)
    keep = (batch["stream_uid"].to_numpy(zero_copy_only=False) == uid) & (seqs >= start)
    if not only_messages:
        keep &= _messages(batch["kind"])
    columns = [batch.column(name) for name in HISTORY_COLUMNS]
    if [column.type for column in columns] == _HISTORY_TYPES:  # (only nullability differs: no cast)
        rows = pa.Table.from_arrays(columns, schema=HISTORY_SCHEMA)
    else:
        rows = pa.Table.from_arrays(columns, names=HISTORY_COLUMNS).cast(HISTORY_SCHEMA)
    if not keep.all():  # (a batch of the stream's messages only is kept as it is: no copy)
        rows, seqs = rows.filter(pa.array(keep)), seqs[keep]
    if not rows.num_rows:
        return
    if rows.num_rows > 1 and not (seqs[1:] > seqs[:-1]).all():
        rows = rows.sort_by("seq")
        seqs = rows["seq"].to_numpy()
    breaks = [0, *((seqs[1:] != seqs[:-1] + 1).nonzero()[0] + 1).tolist(), rows.num_rows]
    for first, stop in itertools.pairwise(breaks):
        runs[int(seqs[first])] = rows.slice(first, stop - first)


def _messages(kinds: pa.Array) -> np.ndarray:
    """Whether each row is a message (files delta-rs rewrote, e.g. by a DELETE, store view
    types: compared as plain strings)."""
    equal = pc.fill_null(pc.equal(kinds.cast(pa.string()), KIND_MESSAGE), False)
    return cast(np.ndarray, equal.to_numpy(zero_copy_only=False))


def within_budget(data: pa.ChunkedArray, budget: int, *, at_least_one: bool) -> tuple[int, int]:
    """How many leading messages a read takes (each while budget remains before it) and their bytes."""
    total = value_bytes(data)
    if len(data) and total < budget:  # all of them: most reads of a short history (no kernels: ~18 µs)
        return len(data), total
    sizes = pc.binary_length(data).cast(pa.int64())
    ends = pc.cumulative_sum(sizes)
    kept = pc.sum(pc.less(pc.subtract(ends, sizes), budget)).as_py() or 0
    kept = max(kept, 1 if at_least_one else 0)
    return kept, ends[kept - 1].as_py() if kept else 0
