"""Helpers of the direct-history-read rows of ``spark_bench.py`` (issue 15).

``server_cpu_s`` reads a process's CPU time (user + system, children excluded) from
``/proc/<pid>/stat``; ``wait_in_delta`` waits until a stream's whole history is in Delta
(the read plan's ``delta_end`` is the tail), so the read measured is all history.
"""

from __future__ import annotations

import os
import time

import requests

PLAN = {"Accept": "application/vnd.durable-streams.read-plan+json"}


def server_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def wait_in_delta(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    with requests.Session() as http:
        http.trust_env = False
        while time.monotonic() < deadline:
            plan = http.get(url, params={"offset": "-1"}, headers=PLAN, timeout=30).json()
            if plan["delta_end"] == plan["end"]:
                return
            time.sleep(0.2)
    raise RuntimeError(f"{url}: history not all in Delta within {timeout_s}s")
