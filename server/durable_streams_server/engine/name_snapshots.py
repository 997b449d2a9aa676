"""Every stream's path, taken on the event loop and made into an Arrow column on any thread.

A listing over a million streams (the status page's) filters and sorts their paths with Arrow's
kernels on a worker thread, so that the event loop is not held for them. What it reads has to be
taken on the loop, where the stream index changes; taking it must not cost what the listing
does. A ``NameSnapshot`` holds:

- ``loose``: the paths held as Python strings (the built streams', at most the cap of streams
  built at once, and the cold index's recent sleepers'), a copy of the list;
- ``chunks``: the cold segment's path chunks as they are (Arrow arrays never change);
- ``alive``: a copy of the cold rows' alive bits in chunk order (one byte a row), or ``None``
  when no row was dead as it was taken (nothing to copy, nothing to filter).

``column()`` makes the column from them, off the loop: the loose paths converted, each chunk
filtered by its bits (a dead row is a stream woken since it slept: its path is among the loose).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class NameSnapshot:
    loose: list[str]
    chunks: tuple[pa.Array, ...] = ()
    alive: np.ndarray[Any, np.dtype[np.bool_]] | None = None

    def column(self) -> pa.ChunkedArray:
        """Every path in the snapshot (loose ones first; no order beyond that)."""
        parts = [pa.array(self.loose, pa.string())]
        start = 0
        for chunk in self.chunks:
            end = start + len(chunk)
            parts.append(chunk if self.alive is None else chunk.filter(pa.array(self.alive[start:end])))
            start = end
        return pa.chunked_array(parts, pa.string())
