"""Time lookups: the first stored message of a stream appended at or after a time.

Every message row carries its append time ``ts``. ``first_at`` answers "which is the first
message of ``uid`` in ``[first, end)`` with ``ts >= at``" from statistics, reading no more
than a row group's ``stream_uid``, ``kind``, ``seq`` and ``ts`` columns where they cannot say
it alone:

1. the Delta log's per-file statistics (``min.seq``, ``max.ts`` … of the table's add
   actions) leave the files that may hold such a message, by their first ``seq``;
2. each such file's footer statistics (cached, ``footers``) leave its row groups that may;
3. those row groups are read, in ``seq`` order, until no later file or row group can hold
   a smaller ``seq`` than the one found.

Append times follow sequence order (the server stamps messages as it orders them), and
flushes and compaction write each stream's rows together, ordered by ``seq``: the first file
and row group the statistics leave then hold the answer, and the walk reads one row group.
A row group shared by several small streams carries their times together, so it may be read
without holding the answer. The answer is exact however the times are ordered (a row group
that could hold an earlier message is read); only the cost depends on the order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .footers import RowGroupStats, message_files, message_row_groups
from .table_schema import KIND_MESSAGE

GROUP_COLUMNS = ["stream_uid", "kind", "seq", "ts"]
"""The columns a time lookup reads from a row group."""


def first_at(
    files: pa.Table,
    stats_of: Callable[[str], RowGroupStats],
    read_group: Callable[[str, int], pa.Table],
    segment: tuple[int, int, int],
    at_us: int,
) -> int | None:
    """The smallest ``seq`` of a message of the segment's uid, ``first <= seq < end``, with
    ``ts >= at_us`` (microseconds since the epoch), or ``None`` if none is stored.

    ``files`` are the table's add actions, flattened; ``stats_of(path)`` a file's row-group
    statistics; ``read_group(path, index)`` a row group's ``GROUP_COLUMNS``."""
    uid, first, end = segment
    if end <= first or files.num_rows == 0:
        return None
    chosen = message_files(files, uid, first, end)
    if "max.ts" in chosen.column_names:
        late = pc.greater_equal(chosen["max.ts"].cast(pa.int64()), at_us)
        chosen = chosen.filter(pc.fill_null(late, True))
    best: int | None = None
    for path, min_seq in zip(chosen["path"].to_pylist(), chosen["min.seq"].to_pylist(), strict=True):
        if best is not None and min_seq is not None and min_seq >= best:
            break  # (files come by first seq: none after this one holds an earlier message)
        stats = stats_of(path)
        for group in message_row_groups(stats, uid, first, end if best is None else best):
            if stats.ts_max[group.index] < at_us or (best is not None and group.first_seq >= best):
                continue
            found = _first_in(read_group(path, group.index), uid, first, end, at_us)
            if found is not None and (best is None or found < best):
                best = found
    return best


def _first_in(table: pa.Table, uid: int, first: int, end: int, at_us: int) -> int | None:
    seqs = table["seq"].to_numpy()
    keep = (table["stream_uid"].to_numpy() == uid) & (seqs >= first) & (seqs < end)
    messages = pc.equal(table["kind"].cast(pa.string()), KIND_MESSAGE)
    keep &= np.asarray(messages.to_numpy(zero_copy_only=False), dtype=bool)
    keep &= table["ts"].cast(pa.int64()).to_numpy() >= at_us
    return int(seqs[keep].min()) if keep.any() else None
