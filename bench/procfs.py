"""What ``/proc`` tells the benchmarks of a process they measure: its CPU seconds (user + system,
its children excluded; its main thread's alone) and its memory (``/proc/PID/status`` fields:
``VmRSS``, ``VmHWM``), and a wait until it has gone quiet (``settle``: several, in turn).

One reader of each file for every benchmark, so that a number means the same in every table.
"""

from __future__ import annotations

import os
import time

from benchkit import progress

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds the process has used so far, user + system (``/proc/PID/stat``)."""
    return _stat_cpu_s(f"/proc/{pid}/stat")


def main_thread_cpu_s(pid: int) -> float:
    """CPU seconds the process's main thread has used so far (``/proc/PID/task/PID/stat``; our
    server's event loop runs there)."""
    return _stat_cpu_s(f"/proc/{pid}/task/{pid}/stat")


def _stat_cpu_s(path: str) -> float:
    with open(path, encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # (the name in parentheses may hold spaces)
    return (int(fields[11]) + int(fields[12])) / _TICKS


def status_kib(pid: int, name: str) -> int:
    """A KiB field of ``/proc/PID/status`` (``VmRSS``, ``VmHWM``, …)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {name} in /proc/{pid}/status")


def rss_mib(pid: int) -> float:
    """The process's resident memory now (``VmRSS``), MiB."""
    return status_kib(pid, "VmRSS") / 1024


def wait_quiet(
    pid: int, busy_below: float = 0.05, window_s: float = 1.0, timeout_s: float = 60.0
) -> tuple[bool, float]:
    """Wait until the process used less than ``busy_below`` of a core over ``window_s`` (what a
    server does in the background after a load: flushes, idle streams put to sleep, checkpoints),
    or ``timeout_s`` has passed: whether it went quiet, and the seconds waited."""
    started = time.monotonic()
    while True:
        before = cpu_s(pid)
        time.sleep(window_s)
        waited = time.monotonic() - started
        if cpu_s(pid) - before < busy_below * window_s:
            return True, waited
        if waited >= timeout_s:
            return False, waited


def settle(*pids: int) -> None:
    """Wait until each of ``pids`` has gone quiet (``wait_quiet``): what a server does after a load
    (flushes, streams put to sleep, a checkpoint) is not to land in the next window, its own or
    another server's. One still busy after the timeout is said so, and the run goes on."""
    for pid in pids:
        quiet, waited = wait_quiet(pid)
        if not quiet:
            progress(f"  process {pid} still busy after {waited:.0f} s; going on")
