"""Slow syncs, injected from outside: do readers of other streams wait for them?

Our server runs as a subprocess on loopback under ``strace``'s fault injection, which delays
the return of the system calls the WAL syncs with (``pwritev2``, the ``RWF_DSYNC`` write;
``fdatasync``, where the file system refuses the flag) by ``--delay-ms``. While one client
appends 100 B messages to one stream back to back, ``--readers`` clients read OTHER streams
(a few messages each, from memory), each one read every ``--read-interval-ms`` (or at once
after a slower one), and time every read from its send to its whole answer. Three conditions, each
on a fresh server, in this order: (a) no delay, (b) 1 sync in ``--every`` delayed (what cloud
block storage does now and then), (c) every sync delayed. Per condition: the reads' p50, p99
and maximum, the reads served, and the appends made (with their p50 and p99).

strace counts a system call's invocations per thread: ``when=40+40`` delays the 40th, 80th,
... call of each thread. The server makes its WAL writes and syncs on one thread, so that is
1 in 40 of them. Every condition runs under strace tracing the same calls (only those stop:
``--seccomp-bpf``), so (a) carries the same tracing cost as (b) and (c).

    python bench/slow_sync_probe.py [--seconds 8] [--readers 2] [--read-interval-ms 5] [--every 40] [--delay-ms 200]
                                    [--source DIR] [--json bench/results/slow_sync.json]

``--source`` runs a server from another checkout (``git archive <commit> | tar -x -C DIR``);
``--json`` adds the run to the ``runs`` kept in that file.
Needs ``strace`` (``apt-get install strace``) and permission to trace (ptrace) here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchkit import percentile, progress

REPO = Path(__file__).resolve().parent.parent
SYNC_CALLS = "pwritev2,fdatasync"
PAYLOAD = b"x" * 100
OCTETS = {"Content-Type": "application/octet-stream"}


def strace_missing() -> str | None:
    """Why the probe cannot inject faults here, or ``None``."""
    if shutil.which("strace") is None:
        return "strace is not installed (apt-get install strace): the probe delays syncs with its fault injection"
    check = subprocess.run(["strace", "-qq", "-o", os.devnull, "true"], capture_output=True, text=True)
    if check.returncode != 0:
        return f"strace cannot trace here (ptrace not permitted?): {check.stderr.strip()}"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _inject(every: int | None, delay_ms: int) -> list[str]:
    """strace's arguments: trace the sync calls, and delay the ``every``-th (``None``: none)."""
    traced = ["-f", "--seccomp-bpf", "-qq", "-o", os.devnull, "-e", f"trace={SYNC_CALLS}"]
    if every is None:
        return traced
    return [*traced, "-e", f"inject={SYNC_CALLS}:delay_exit={delay_ms * 1000}:when={every}+{every}"]


def _start(source: Path, work: Path, strace_args: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{source / 'server'}{os.pathsep}{source}"}
    command = ["strace", *strace_args, sys.executable, "-m", "durable_streams_server"]
    command += ["--port", str(port), "--data-dir", str(work)]
    log = open(work.parent / f"{work.name}.log", "wb")  # noqa: SIM115 - the server's, closed with it
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}: see {log.name}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return process, port
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not listen within 60 s: see {log.name}")
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _client(port: int, method: str, path: str, interval_s: float, window: tuple[float, float], out: Any) -> None:
    """Requests on one keep-alive connection, one every ``interval_s`` at most (0: back to
    back); the latencies (s, from sending the request to its whole answer) of those sent in
    ``window``. A request that took longer than the interval is followed by the next at once."""
    import loadgen

    start_at, stop_at = window
    connection = loadgen.Connection(port)
    request = loadgen.render(method, path, port, PAYLOAD if method == "POST" else b"", OCTETS)
    expected = 204 if method == "POST" else 200
    latencies = []
    while True:
        started = time.monotonic()
        if started >= stop_at:
            break
        connection.send(request)
        response = connection.receive()
        ended = time.monotonic()
        assert response.status == expected, (method, path, response.status)
        if started >= start_at:
            latencies.append(ended - started)
        if ended - started < interval_s:
            time.sleep(interval_s - (ended - started))
    connection.close()
    out.put((method, latencies))


def _condition(source: Path, work: Path, every: int | None, args: argparse.Namespace) -> dict[str, Any]:
    import loadgen

    process, port = _start(source, work, _inject(every, args.delay_ms))
    try:
        setup = loadgen.Connection(port)
        for path in ["/v1/stream/written", *(f"/v1/stream/read-{i}" for i in range(args.readers))]:
            assert setup.request("PUT", path, headers=OCTETS).status == 201
            if path != "/v1/stream/written":
                for _ in range(5):
                    assert setup.request("POST", path, PAYLOAD, OCTETS).status == 204
        setup.close()
        start_at = time.monotonic() + args.warmup
        stop_at = start_at + args.seconds
        out: multiprocessing.Queue[tuple[str, list[float]]] = multiprocessing.Queue()
        window = (start_at, stop_at)
        clients = [("POST", "/v1/stream/written", 0.0)]
        clients += [
            ("GET", f"/v1/stream/read-{i}?offset=-1", args.read_interval_ms / 1000) for i in range(args.readers)
        ]
        workers = [
            multiprocessing.Process(target=_client, args=(port, method, path, interval, window, out))
            for method, path, interval in clients
        ]
        for worker in workers:
            worker.start()
        gathered = [out.get(timeout=args.warmup + args.seconds + 60) for _ in workers]
        for worker in workers:
            worker.join(timeout=30)
    finally:
        _stop(process)
    reads = [latency for method, latencies in gathered if method == "GET" for latency in latencies]
    appends = [latency for method, latencies in gathered if method == "POST" for latency in latencies]
    return {
        "delayed": "none" if every is None else f"1 in {every}" if every > 1 else "every",
        "delay_ms": 0 if every is None else args.delay_ms,
        "reads": len(reads),
        "read_p50_ms": percentile(reads, 0.5) * 1000,
        "read_p99_ms": percentile(reads, 0.99) * 1000,
        "read_max_ms": max(reads, default=float("nan")) * 1000,
        "appends": len(appends),
        "append_p50_ms": percentile(appends, 0.5) * 1000,
        "append_p99_ms": percentile(appends, 0.99) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per condition")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--readers", type=int, default=2, help="clients reading other streams")
    parser.add_argument("--read-interval-ms", type=float, default=5.0, help="each reader's pace (0: back to back)")
    parser.add_argument("--every", type=int, default=40, help="condition (b) delays 1 sync in this many")
    parser.add_argument("--delay-ms", type=int, default=200)
    parser.add_argument("--source", type=Path, default=REPO, help="the checkout whose server runs")
    parser.add_argument("--label", help="what the source is (e.g. its commit), kept with the run")
    parser.add_argument("--json", type=Path, help="add the run to this file's runs")
    args = parser.parse_args()
    missing = strace_missing()
    if missing is not None:
        print(f"slow_sync_probe: {missing}", file=sys.stderr)
        sys.exit(2)
    work = Path(tempfile.mkdtemp(prefix="ds-slow-sync-"))
    load_before = os.getloadavg()[0]
    rows = []
    try:
        for index, every in enumerate((None, args.every, 1)):
            row = _condition(args.source.resolve(), work / f"data-{index}", every, args)
            progress(
                f"delayed {row['delayed']:>8}: reads p50 {row['read_p50_ms']:.2f} ms, p99 {row['read_p99_ms']:.2f} ms, "
                f"max {row['read_max_ms']:.1f} ms, {row['reads']:,} served; appends {row['appends']:,} "
                f"(p50 {row['append_p50_ms']:.2f} ms, p99 {row['append_p99_ms']:.2f} ms)"
            )
            rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record = {
        "probe": "bench/slow_sync_probe.py",
        "source": str(args.source),
        "label": args.label or _commit(args.source),
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "conditions": {
            "network": "loopback",
            "disk": "this machine's disk (the data directory under the system's temp dir)",
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "strace": f"-e trace={SYNC_CALLS}, delay_exit {args.delay_ms} ms, --seccomp-bpf",
            "seconds": args.seconds,
            "readers": args.readers,
            "read_interval_ms": args.read_interval_ms,
            "appenders": 1,
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        },
        "rows": rows,
    }
    print(json.dumps(record, indent=2))
    if args.json is not None:
        _append_run(args.json, record)


def _append_run(path: Path, record: dict[str, Any]) -> None:
    """Add this run to the ``runs`` kept in ``path`` (created with its folder if missing)."""
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"runs": [*runs, record]}, indent=2) + "\n")


def _commit(source: Path) -> str | None:
    found = subprocess.run(["git", "-C", str(source), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else None


if __name__ == "__main__":
    main()
