"""Why a shard server's last start was refused, in its data directory, for the node that started it.

A cluster node starts each shard's server as a process of its own and sees only how it exited:
``3`` for a start refused (the shard's table missing, its WAL another table's, its location
another owner's). The reason is the server's ``start refused`` log line, which goes to the
node's log among all its other lines. So a shard server that refuses its start also writes the
reason to ``start-refused`` in its data directory, beside its pid; the node reads it when it
sees that process exit (``cluster.node.start_failures``) and shows it beside the shard. A start
that recovers its storage removes the file.

Not fsynced, and never an error of its own: a file lost or not written loses an explanation,
which the log still has, never a start's outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

FILE = "start-refused"
"""In the data directory: JSON, ``pid`` (the refusing process's) and ``reason``."""


def note(data_dir: Path, reason: str) -> None:
    """This process's start on ``data_dir`` was refused for ``reason``."""
    written = data_dir / f"{FILE}.{os.getpid()}.tmp"
    try:
        written.write_text(json.dumps({"pid": os.getpid(), "reason": reason}), encoding="utf-8")
        os.replace(written, data_dir / FILE)
    except OSError:
        with contextlib.suppress(OSError):
            written.unlink()


def clear(data_dir: Path) -> None:
    """A start on ``data_dir`` got past its storage's recovery: no refusal to explain."""
    with contextlib.suppress(OSError):
        (data_dir / FILE).unlink()


def reason_of(data_dir: Path, pid: int) -> str | None:
    """Why the process ``pid`` refused its start on ``data_dir``; ``None``: it wrote no reason (it
    did not refuse, or failed otherwise), or another process's is there."""
    try:
        found = json.loads((data_dir / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or found.get("pid") != pid or not isinstance(found.get("reason"), str):
        return None
    reason: str = found["reason"]
    return reason
