"""Why a shard this node tried to serve is not served: its server's last failed start.

A shard server that exits before it is ready (a start refused: the shard's table missing, its
WAL another table's, its location another owner's; a store failing during the take-over) is
started again, then its lease is let go (``workers.START_ATTEMPTS``), and the shard answers
``503`` while node after node tries it. The node's log says why, line by line; ``GET
/v1/cluster`` (and the status page's cluster view) says it beside the shard: the exit code, the
refusal's reason where the server refused its start (``storage/start_refusal.py``), the attempt,
how long ago, and whether the lease was let go, until the node sees the shard served (by its
own server or another node's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ...storage import start_refusal
from .workers import ShardServer

EXIT_MEANINGS = {
    3: "its start failed or was refused (a refusal's reason is beside this; other failures: the shard server's lines "
    "in this node's log)",
    -9: "killed (SIGKILL: by this node, the kernel's OOM killer or an operator)",
}


@dataclass(frozen=True, slots=True)
class FailedStart:
    exit_code: int | None
    attempt: int
    at: float
    """``time.monotonic()`` when its exit was seen."""
    lease_released: bool
    reason: str | None
    """Why the start was refused, as the server wrote it (``None``: it wrote none)."""


class StartFailures:
    """The last failed start of each shard's server on this node, until the shard is served."""

    def __init__(self) -> None:
        self._last: dict[int, FailedStart] = {}

    def failed(self, shard: int, server: ShardServer, data_dir: Path, *, lease_released: bool) -> None:
        """``server`` (``shard``'s, on ``data_dir``) exited before it was ready."""
        code, reason = server.proc.returncode, start_refusal.reason_of(data_dir, server.proc.pid)
        self._last[shard] = FailedStart(code, server.attempt, time.monotonic(), lease_released, reason)

    def served(self, shard: int) -> None:
        self._last.pop(shard, None)

    def describe(self, shard: int) -> dict[str, object] | None:
        found = self._last.get(shard)
        if found is None:
            return None
        return {
            "exit_code": found.exit_code,
            "meaning": EXIT_MEANINGS.get(found.exit_code, "") if found.exit_code is not None else "",
            "reason": found.reason,
            "attempt": found.attempt,
            "seconds_ago": round(time.monotonic() - found.at, 1),
            "lease_released": found.lease_released,
        }
