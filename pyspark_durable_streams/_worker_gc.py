"""Python workers: the objects of their imports kept out of the collection after every task.

A reused PySpark worker (``spark.python.worker.reuse``, the default) runs a full garbage
collection after every task before it takes the next one (``pyspark/daemon.py``:
``gc.collect()`` in the worker's loop). A full collection traverses every container the
process tracks, and a worker that has imported pyarrow, pandas, PySpark and this package
tracks ~87,000 of them: ~35 ms of CPU per task on an idle core (55-150 ms of wall time on two
busy ones), paid between every two tasks of the worker. For a batch read of 1,000,000
messages in 10 tasks that was ~0.4 s of the Python workers' ~0.8 s of CPU
(bench/README.md, "Direct history reads", eleventh session).

So a task of this source or sink, when it starts, moves everything the process tracks into
the permanent generation (``gc.freeze()``) if more than ``REFREEZE_AT`` objects survived the
collections since the last freeze: modules, classes, functions and caches, which live as long
as the process. From then on the collection after each task traverses only what later tasks
made. In practice a worker freezes twice: at its first task (~57,000 objects), and at its
second (the ~29,000 that the first task's lazy imports added). Counting the survivors is
cheap while there are few of them (they are generation 2: the daemon's full collection after
the previous task moved every survivor there).

What this costs: an object that survived the collections and later becomes part of a
reference cycle that nothing references is not freed while it is frozen (objects freed by
their reference count are freed as before). What survives a full collection with no task
running is held by modules and their caches, so such garbage is rare; still, a worker lives
as long as its executor (a streaming query's, for weeks), and a cache a task evicts could leave
cycles behind. So frozen objects are looked at again every ``REEXAMINE_S``: the task that finds
that time passed since its worker's last freeze unfreezes, collects everything once (~35 ms)
and freezes again. Garbage that was frozen lives at most that long.

Only in reused workers (``SPARK_REUSE_WORKER`` set, which is when the daemon collects after
each task). ``DURABLE_STREAMS_WORKER_GC_FREEZE=false`` in the executors' environment
(``spark.executorEnv.DURABLE_STREAMS_WORKER_GC_FREEZE``) turns it off.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable

__all__ = ["REEXAMINE_S", "REFREEZE_AT", "freeze_worker_imports"]

OPT_OUT = "DURABLE_STREAMS_WORKER_GC_FREEZE"
REFREEZE_AT = 2_000
"""Survivors since the last freeze that make a task freeze again (a collection of 2,000 objects
takes ~0.3 ms)."""
REEXAMINE_S = 600.0
"""How long frozen objects stay frozen before a task unfreezes, collects and freezes again."""
_frozen_at: float | None = None
"""``clock()`` of this process's last freeze. Objects frozen before the first (a parent process
may freeze what its forked children share) stay frozen until the first re-examination."""


def freeze_worker_imports(clock: Callable[[], float] = time.monotonic) -> bool:
    """Freeze what this reused worker tracks, if enough has survived since the last freeze or
    the frozen objects are due to be looked at again; whether it did now."""
    global _frozen_at
    if not os.environ.get("SPARK_REUSE_WORKER"):
        return False
    if os.environ.get(OPT_OUT, "true").strip().lower() in ("false", "0", "no", "off"):
        return False
    now = clock()
    frozen = gc.get_freeze_count()
    due = bool(frozen) and _frozen_at is not None and now - _frozen_at >= REEXAMINE_S
    if frozen and not due and len(gc.get_objects(generation=2)) <= REFREEZE_AT:
        return False
    if due:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    _frozen_at = now
    return True
