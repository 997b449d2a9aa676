"""A shard server's tie to the node that started it: it dies with the node.

A node starts its shard servers with ``cluster_parent`` (its pid: ``cluster.node.workers``); the
shard server asks the kernel to kill it when the node's supervisor thread ends
(``prctl(PR_SET_PDEATHSIG)``), so a node killed with ``kill -9`` leaves no shard server
acknowledging behind it.
"""

from __future__ import annotations

import os
import signal
import sys


def die_with_parent(parent_pid: int) -> None:
    """In a shard server: be killed by the kernel when the node that started it ends; exit now
    if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)
