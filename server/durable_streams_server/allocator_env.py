"""The environment the native allocators read once, as their libraries load.

Set by the package's ``__init__`` before anything imports ``pyarrow`` (Arrow's mimalloc reads
its options when ``libarrow`` loads) or ``deltalake`` (delta-rs's jemalloc reads its own when
``deltalake`` is imported), where the operator has not set them; afterwards they change
nothing. Why each is what it is: ``allocators``. This module imports nothing of the package.
"""

from __future__ import annotations

import os

NATIVE_ALLOCATOR_ENV = {
    "_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0",
    "MIMALLOC_ALLOW_THP": "0",
}


def native_allocator_env() -> None:
    """Set ``NATIVE_ALLOCATOR_ENV`` where the operator has not."""
    for name, value in NATIVE_ALLOCATOR_ENV.items():
        os.environ.setdefault(name, value)
