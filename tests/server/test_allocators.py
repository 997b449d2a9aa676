"""``allocators.tune_allocators``, in a fresh process of its own: Arrow's jemalloc hands freed pages
back at once on the threads that allocate after it is set (the storage threads: a history read's
decoded buffers are faulted in afresh each time), while the first thread's arena, made when jemalloc
started, keeps Arrow's default decay (the event loop's garbage stays mapped a while). What the
module docstring says, measured: pages faulted per 1 MiB buffer allocated, touched and freed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_CHURN = """
import json, resource, sys, threading
import numpy as np
import pyarrow as pa
from durable_streams_server.allocators import tune_allocators

applied = tune_allocators()
faults = {}

def churn(label):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        buffer = pa.allocate_buffer(1 << 20)
        pages = np.ndarray((1 << 20,), dtype=np.uint8, buffer=memoryview(buffer))
        pages[::4096] = 1
        del pages, buffer
    faults[label] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 100

churn("main")
worker = threading.Thread(target=churn, args=("worker",))
worker.start()
worker.join()
print(json.dumps({"applied": applied, "pool": pa.default_memory_pool().backend_name, "faults": faults}))
"""


def test_freed_arrow_pages_go_back_at_once_on_worker_threads_only() -> None:
    env = {name: value for name, value in os.environ.items() if name != "ARROW_DEFAULT_MEMORY_POOL"}  # (the defaults)
    out = subprocess.run(
        [sys.executable, "-c", _CHURN], check=True, capture_output=True, text=True, timeout=120, env=env
    )
    found = json.loads(out.stdout)
    assert found["pool"] == "jemalloc" and found["applied"]["arrow_pool"] == "jemalloc"
    assert found["faults"]["worker"] >= 200  # (256 pages a MiB: every buffer mapped afresh)
    assert found["faults"]["main"] <= 32  # (the freed pages reused)
