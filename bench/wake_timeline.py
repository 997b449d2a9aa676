"""Where a long-poll wake's time goes: a timeline of one append waking one parked reader.

Runs our server in this process (``tests/inprocess.serving``: the CLI's protocol class and
loop) with time stamps wrapped around the steps of the path (the protocol's
``data_received``, the direct cycle, the handler, the engine's append, the WAL write and
sync, the durable mark, the responses' writes), and the bench's ``lp1`` pattern from another
process: park a long-poll at the tail, wait ``--idle-ms``, append 100 B, read both answers.
Prints, per step, the median time from the ``data_received`` that brought the append.

    python bench/wake_timeline.py [--rounds 60] [--idle-ms 50]

``--idle-ms 0.5`` shows the same path back to back: the difference is what idling costs
(the process wake-ups after an idle spell). The wrappers add a few µs per step.
"""

from __future__ import annotations

import argparse
import collections
import functools
import inspect
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path += [str(REPO / "tests")]

from inprocess import serving  # noqa: E402
from server_bench import Server, long_poll_wake  # noqa: E402

from durable_streams_server import ServerConfig  # noqa: E402
from durable_streams_server.engine.engine import Engine  # noqa: E402
from durable_streams_server.http.fastpath.cycle import FastCycle as DirectCycle  # noqa: E402
from durable_streams_server.http.fastpath.protocol import FastPathProtocol as GuardedHttpToolsProtocol  # noqa: E402
from durable_streams_server.http.fastpath.route import FastPath as LeanPath  # noqa: E402
from durable_streams_server.http.streams import StreamHandlers  # noqa: E402
from durable_streams_server.storage.acks import Acknowledgements  # noqa: E402
from durable_streams_server.storage.committer import Storage  # noqa: E402
from durable_streams_server.storage.wal import WriteAheadLog  # noqa: E402

STEPS: list[tuple[type, str, str]] = [
    (GuardedHttpToolsProtocol, "data_received", "data_received"),
    (DirectCycle, "run_asgi", "direct cycle"),
    (LeanPath, "respond", "handler"),
    (StreamHandlers, "plain_append", "append handler"),
    (Engine, "append", "engine append"),
    (Storage, "submit", "record encoded, queued"),
    (WriteAheadLog, "write", "WAL write + sync"),
    (Acknowledgements, "mark_durable", "marked durable"),
    (DirectCycle, "_send", "response written"),
]


def _stamped(stamps: list[tuple[str, float]], label: str, method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def stamped_async(*args: Any, **kwargs: Any) -> Any:
            stamps.append((label, time.perf_counter()))
            return await method(*args, **kwargs)

        return stamped_async

    @functools.wraps(method)
    def stamped(*args: Any, **kwargs: Any) -> Any:
        stamps.append((label, time.perf_counter()))
        result = method(*args, **kwargs)
        stamps.append((label + " (end)", time.perf_counter()))
        return result

    return stamped


def _timeline(stamps: list[tuple[str, float]], skip: int) -> dict[str, list[float]]:
    """Per step (numbered by its occurrence), ms from the ``data_received`` bringing each append."""
    steps: dict[str, list[float]] = collections.defaultdict(list)
    writes = [i for i, (label, _) in enumerate(stamps) if label == "WAL write + sync"]
    for at in writes[skip:]:
        start = max(i for i in range(at) if stamps[i][0] == "data_received")
        counts: collections.Counter[str] = collections.Counter()
        answers = 0
        for label, stamp in stamps[start:]:
            steps[f"{label} #{counts[label] + 1}"].append(1000 * (stamp - stamps[start][1]))
            counts[label] += 1
            answers += label == "response written (end)"
            if answers == 2:  # the reader's answer and the writer's 204
                break
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--idle-ms", type=float, default=50.0)
    args = parser.parse_args()
    stamps: list[tuple[str, float]] = []
    for cls, name, label in STEPS:
        setattr(cls, name, _stamped(stamps, label, getattr(cls, name)))
    with tempfile.TemporaryDirectory(prefix="ds-wake-") as work, serving(ServerConfig(data_dir=Path(work))) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        with multiprocessing.get_context("spawn").Pool(1) as pool:  # (the bench's lp1 load, from another process)
            seen = pool.apply(long_poll_wake, (Server("ours", port, os.getpid()), 1, args.rounds, args.idle_ms / 1000))
    print(f"{args.rounds} rounds, {args.idle_ms:g} ms idle before each append; medians, ms from data_received:")
    for label, values in sorted(_timeline(stamps, 5).items(), key=lambda item: statistics.median(item[1])):
        print(f"  {statistics.median(values):7.3f}  {label}  (n={len(values)})")
    print(f"the client has the reader's answer {seen['p50 ms']:.3f} ms after sending the append (p50)")


if __name__ == "__main__":
    main()
