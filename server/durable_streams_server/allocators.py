"""Allocator settings of the server process, applied once at start-up (``cli.main``).

The memory budget (``engine.memory``) bounds what the server keeps by choice; what the
process's allocators keep on top of that (freed memory not yet returned, one glibc arena
per thread that ever allocated) is the larger part of the rest. Measured with 500 active
streams, 2 GiB stored and a 512 MiB budget (bench/README.md, "memory"), one run each on a
busy machine: RSS after reading everything back was 1,020-1,040 MiB with Arrow's default
pool (mimalloc), ~960 MiB with jemalloc, 900-965 MiB with jemalloc and two glibc arenas. So:

- Arrow allocates from **jemalloc** (decoded Parquet, message buffers, Delta writes), which
  returns freed pages to the system after a short decay; ``ARROW_DEFAULT_MEMORY_POOL`` set
  by the operator wins.
- glibc keeps at most **two arenas** (``M_ARENA_MAX``): the event loop, the worker threads
  and delta-rs's runtime share them instead of holding a 64 MiB heap each.
  ``MALLOC_ARENA_MAX`` set by the operator wins.
"""

from __future__ import annotations

import os

import pyarrow as pa

from .engine.memory_guard import glibc

_M_ARENA_MAX = -8
"""``mallopt`` parameter number (glibc's malloc.h)."""
GLIBC_ARENAS = 2


def tune_allocators() -> dict[str, str]:
    """Apply the settings above where the operator has not chosen; what was set, for the log."""
    applied: dict[str, str] = {}
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ and "jemalloc" in pa.supported_memory_backends():
        pa.set_memory_pool(pa.jemalloc_memory_pool())
        applied["arrow_pool"] = "jemalloc"
    libc = glibc()  # (None elsewhere: musl has no arenas and no M_ARENA_MAX)
    if "MALLOC_ARENA_MAX" not in os.environ and libc is not None and libc.mallopt(_M_ARENA_MAX, GLIBC_ARENAS) == 1:
        applied["glibc_arenas"] = str(GLIBC_ARENAS)
    return applied
