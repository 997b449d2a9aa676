"""Python workers, opt-in (option ``freezeWorkerGc``): their imports kept out of the collection
after every task.

A reused PySpark worker (``spark.python.worker.reuse``, the default) runs a full garbage
collection after every task before it takes the next one (``pyspark/daemon.py``:
``gc.collect()`` in the worker's loop). A full collection traverses every container the
process tracks, and a worker that has imported pyarrow, pandas, PySpark and this package
tracks tens of thousands of them, so each collection costs CPU between every two tasks of the
worker, whatever the tasks did (bench/README.md, "Direct history reads", the collection after
every task, has the measurements).

With the option set, a task of this source or sink, when it starts, moves everything the
process tracks into the permanent generation (``gc.freeze()``) if more than ``REFREEZE_AT``
objects survived the collections since the last freeze: modules, classes, functions and
caches, which live as long as the process. From then on the collection after each task
traverses only what later tasks made. In practice a worker freezes twice: at its first task,
and at its second (what the first task's lazy imports added). Counting the survivors is cheap
while there are few of them (they are generation 2: the daemon's full collection after the
previous task moved every survivor there).

Why it is off by default: the freeze is process-wide. Every object in the worker is frozen,
other UDFs' and other sources' included, and an object that survived the collections and
later becomes part of a reference cycle that nothing references is not freed while it is
frozen (objects freed by their reference count are freed as before). Frozen objects are
looked at again every ``REEXAMINE_S``, but only by a task of a read or write with the option
set: the task that finds that time passed since its worker's last freeze unfreezes, collects
everything once and freezes again. So frozen garbage lives at most that long in a worker that
keeps running such tasks, and until the worker exits in one that does not.

Only in reused workers (``SPARK_REUSE_WORKER`` set, which is when the daemon collects after
each task).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable

__all__ = ["REEXAMINE_S", "REFREEZE_AT", "freeze_worker_imports"]

REFREEZE_AT = 2_000
"""Survivors since the last freeze that make a task freeze again (a collection of this many
objects is cheap next to one of everything the worker imported)."""
REEXAMINE_S = 600.0
"""How long frozen objects stay frozen before a task unfreezes, collects and freezes again."""
_frozen_at: float | None = None
"""``clock()`` of this process's last freeze. Objects frozen before the first (a parent process
may freeze what its forked children share) stay frozen until the first re-examination."""


def freeze_worker_imports(clock: Callable[[], float] = time.monotonic) -> bool:
    """Freeze what this reused worker tracks, if enough has survived since the last freeze or
    the frozen objects are due to be looked at again; whether it did now. Called at the start
    of a task whose read or write set ``freezeWorkerGc``."""
    global _frozen_at
    if not os.environ.get("SPARK_REUSE_WORKER"):
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
