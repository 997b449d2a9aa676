"""The cyclic garbage collector in the server process, set once at start-up (``cli.main``).

CPython's collector scans every tracked container in a full (generation 2) collection, and
runs one whenever the long-lived containers have grown by a quarter since the last: a pause
of the event loop -- every request waits -- proportional to everything tracked. What start-up
built (pyarrow, deltalake, pandas, Starlette, uvicorn, the app and its storage) is most of
what a young server tracks, scanned again by every full collection for nothing (the figures:
bench/README.md, "Figures behind design choices").

So, once the app has started (storage recovered and running) and before it serves,
everything alive is **frozen** (``gc.freeze``): moved to the permanent generation, never
scanned again. It lives as long as the process (modules, classes, the app and its storage
objects), so nothing is lost by never collecting it; start-up's garbage is collected first
so that it is not frozen with them. Objects made afterwards are collected as before.

What is left grows with the streams awake in memory: a ``Stream`` (its ~35 fields make it
the costly one to scan) and its ``MemoryTail``, two containers while no messages are in
memory (``engine/memory_tail.py``), so a full collection grows with the streams in memory.
Streams restored at a restart stay dormant, no container at
all, until used (``engine/stream_index.py``), and streams unused for a while go back to
sleep (``engine/idle.py``), so what is scanned follows the streams in use.
"""

from __future__ import annotations

import gc


def freeze_start_up_objects() -> int:
    """Collect, then freeze everything alive; how many objects are frozen now (for the log)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
