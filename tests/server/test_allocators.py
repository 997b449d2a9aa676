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
from pathlib import Path

import httpx
import pytest
from servers import ServerProcess

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


def _advised_for_huge_pages(pid: int) -> int:
    """How many of the process's mappings were advised ``MADV_HUGEPAGE`` (``hg`` in ``VmFlags``)."""
    with open(f"/proc/{pid}/smaps") as smaps:
        return sum(1 for line in smaps if line.startswith("VmFlags:") and " hg" in line)


def _kernel_offers_huge_pages() -> bool:
    """Transparent huge pages on ``madvise`` (or ``always``): what mimalloc's advice asks for."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as enabled:
            return "[never]" not in enabled.read()
    except OSError:
        return False


@pytest.mark.parametrize("operator", [None, "1"], ids=["default", "operator-allows"])
def test_arrows_mimalloc_asks_for_no_huge_pages_unless_the_operator_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operator: str | None
) -> None:
    """Arrow's mimalloc (Parquet's buffers, the exports to delta-rs) advises its 1 GiB arena for
    huge pages unless ``MIMALLOC_ALLOW_THP=0``: the server sets that before ``pyarrow`` loads
    (``allocator_env``); an operator's own value wins."""
    if operator is not None and not _kernel_offers_huge_pages():
        pytest.skip("this kernel offers no transparent huge pages to advise (nothing to allow)")
    monkeypatch.delenv("MIMALLOC_ALLOW_THP", raising=False)  # (this test process's own import set it)
    env = {} if operator is None else {"MIMALLOC_ALLOW_THP": operator}
    server = ServerProcess(tmp_path / "data", env=env).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.put("/v1/stream/huge", headers={"Content-Type": "text/plain"}).status_code == 201
            for index in range(20):
                assert (
                    http.post(
                        "/v1/stream/huge", content=f"m{index}".encode(), headers={"Content-Type": "text/plain"}
                    ).status_code
                    == 204
                )
        assert server.proc is not None
        advised = _advised_for_huge_pages(server.proc.pid)
    finally:
        server.kill()
    if operator is None:
        assert advised == 0
    else:
        assert advised >= 1  # (the arena, advised: what the default prevents)
