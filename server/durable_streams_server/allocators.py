"""Allocator settings of the server process, applied once at start-up (``cli.main``).

The memory budget (``engine.memory``) bounds what the server keeps by choice; what the
process's allocators keep on top of that (freed memory not yet returned, one glibc arena
per thread that ever allocated) is the larger part of the rest. Measured with 500 active
streams, 2 GiB stored and a 512 MiB budget (bench/README.md, "memory"), one run each on a
busy machine: RSS after reading everything back was 1,020-1,040 MiB with Arrow's default
pool (mimalloc), ~960 MiB with jemalloc, 900-965 MiB with jemalloc and two glibc arenas. So:

- Arrow allocates from **jemalloc** (decoded Parquet, message buffers, Delta writes), which
  returns freed pages to the system at once (``ARROW_DECAY_MS``: a flush's columns are copied
  twice while they are sorted, and with Arrow's default decay of a second the copies freed
  stayed resident through the commit, ~2x the batch); ``ARROW_DEFAULT_MEMORY_POOL`` set by
  the operator wins. The decay reaches the arenas jemalloc makes after it is set, those of
  the worker threads (the flush, history reads): the first thread's arena, made when
  jemalloc started, keeps Arrow's default, so what the event loop frees stays mapped a while.
  Measured (tests/server/test_allocators.py): a 1 MiB buffer allocated, touched and freed
  faults ~256 pages in afresh on a worker thread, ~3 on the main one. A catch-up read pays
  it: its decoded messages are faulted in as they are decoded (~250 pages a MiB served).
- glibc keeps at most **two arenas** (``M_ARENA_MAX``): the event loop, the worker threads
  and delta-rs's runtime share them instead of holding a 64 MiB heap each.
  ``MALLOC_ARENA_MAX`` set by the operator wins.
- delta-rs (the ``deltalake`` module) allocates from a **jemalloc of its own** (tikv-jemallocator,
  configured by ``_RJEM_MALLOC_CONF``, read once when ``deltalake`` is imported). Its default keeps
  freed pages for 10 s of *its own* activity: after a burst of large commits (1 MiB appends at
  100+ MiB/s) they stayed resident, hundreds of MiB, until the next commits, and during
  the burst each commit's Parquet buffers added to the last's. ``NATIVE_ALLOCATOR_ENV`` asks it
  to hand freed pages back at once (``dirty_decay_ms:0``).
- Arrow's own C++ code still allocates from its **mimalloc** where pyarrow passes no pool (Parquet
  reads' and writes' internal buffers, the C data interface's exports to delta-rs). mimalloc
  reserves a 1 GiB arena and asks for transparent huge pages on it (``MADV_HUGEPAGE``), where a
  2 MiB page stays resident whole while any block in it lives: with a million streams created,
  110-182 MiB of that arena was in huge pages.
  ``NATIVE_ALLOCATOR_ENV`` turns that off (``MIMALLOC_ALLOW_THP=0``): in the streams benchmark's
  procedure (1,050,000 streams, a restart after the first 150,000), RSS 3 s after the last create
  644 MiB against 665-703 with it, no huge page left; a 50 MiB binary catch-up (``server_bench.py
  --only catchup``, two runs of each in turn) 604-628 MiB/s against 550-581. ``tests/server/
  test_allocators.py`` checks the server's process has no mapping advised for huge pages.

The package sets ``NATIVE_ALLOCATOR_ENV`` (``allocator_env``) from its ``__init__`` before
anything imports ``pyarrow`` or ``deltalake``, unless the operator set it.
"""

from __future__ import annotations

import os

import pyarrow as pa

from .engine.memory_guard import glibc

_M_ARENA_MAX = -8
"""``mallopt`` parameter number (glibc's malloc.h)."""
GLIBC_ARENAS = 2
ARROW_DECAY_MS = 0


def tune_allocators() -> dict[str, str]:
    """Apply the settings above where the operator has not chosen; what was set, for the log."""
    applied: dict[str, str] = {}
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ and "jemalloc" in pa.supported_memory_backends():
        pa.set_memory_pool(pa.jemalloc_memory_pool())
        pa.jemalloc_set_decay_ms(ARROW_DECAY_MS)
        applied["arrow_pool"] = "jemalloc"
    libc = glibc()  # (None elsewhere: musl has no arenas and no M_ARENA_MAX)
    if "MALLOC_ARENA_MAX" not in os.environ and libc is not None and libc.mallopt(_M_ARENA_MAX, GLIBC_ARENAS) == 1:
        applied["glibc_arenas"] = str(GLIBC_ARENAS)
    return applied
