"""A shard's new owner: how long from its start to serving, against the history it takes over.

What a cluster's failover costs once a dead node's lease has expired (``cluster/node/supervisor.py``):
a shard server starts on the shard's storage, claims it and reads its state, then serves. Not
a timed test. For each history size N, one delta-durability server on moto's S3 server (on
loopback) gets N single appends to one stream (N Delta commits: each waits for its own), and is
killed (SIGKILL). A new server then starts on the same location as a cluster node starts one
for an expired lease (``--take-over ask --take-over-timeout-s 0``), in two ways:

- **cold**: ``durable-streams-server`` spawned with its options: its imports are part of it;
- **spare**: ``durable-streams-server shard-server`` spawned first and given its settings once
  it waits for them, as a node's spare shard server is (``cluster.node.workers.SpareServer``).

Each row: ms from the start (the spawn, or the settings written) to ``/readyz`` 200, and the
server's own log times (JSON, milliseconds) of its claim and its recovery. Sizes accumulate on
one location, so a row also shows whether the cost follows the history (it must not: log and
state checkpoints every 20 commits bound what a new owner reads).

The history's shape: ``--streams`` streams written by ``--writers`` concurrent writers (each
append to a random stream; a flush then commits several streams' messages and states, as the
fault suite's workload does); ``--streams 1 --writers 1`` is one stream of single appends.

    python bench/takeover_bench.py [--sizes 20,200,1000] [--streams 6 --writers 6]

The record goes to ``bench/results/scratch/takeover.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import requests
from benchkit import SCRATCH_DIR, conditions, progress
from server_bench import REPO

sys.path.insert(0, str(REPO / "tests"))
from servers import MotoServer, ServerProcess

from durable_streams_server.cli import load_settings
from durable_streams_server.cluster.node.workers import SHARD_SERVER_COMMAND, send_settings

TEXT = {"Content-Type": "text/plain"}


def _log_ms(log: str, since: float) -> dict[str, float]:
    """ms after ``since`` (epoch s) of the start's logged steps, from JSON log lines."""
    steps: dict[str, float] = {}
    for line in log.splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        stamp = datetime.strptime(event["ts"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if stamp >= since - 1 and event["msg"] in ("took the storage over", "recovered", "ready"):
            steps[event["msg"]] = round(1000 * (stamp - since))
    return steps


def _until_ready(url: str, started: float) -> float:
    while True:
        try:
            if requests.get(f"{url}/readyz", timeout=1).status_code == 200:
                return round(1000 * (time.monotonic() - started))
        except requests.RequestException:
            pass
        time.sleep(0.01)


def take_over(args: list[str], work: Path, name: str, spare: bool) -> dict[str, object]:
    data = work / name
    server = ServerProcess(data, [*args, "--node-id", name, "--take-over", "ask", "--take-over-timeout-s", "0"])
    if not spare:
        since, started = time.time(), time.monotonic()
        server.start()
        ready_ms = _until_ready(server.url, started)
        log = server.log_text()
        server.kill()
        return {"ready_ms": ready_ms, **_log_ms(log, since)}
    data.mkdir(parents=True)
    settings = load_settings([*server.extra_args, "--port", str(server.port), "--data-dir", str(data)])
    log_path = work / f"{name}.log"
    with log_path.open("wb") as log_file:  # (as a node's spare, with its log kept apart)
        proc = subprocess.Popen(SHARD_SERVER_COMMAND, stdin=subprocess.PIPE, stderr=log_file)
        time.sleep(3)  # (its imports done: it waits for its settings)
        since, started = time.time(), time.monotonic()
        send_settings(proc, settings)
        ready_ms = _until_ready(server.url, started)
        proc.kill()
        proc.wait()
    return {"ready_ms": ready_ms, **_log_ms(log_path.read_text(errors="replace"), since)}


def _write(writer: ServerProcess, names: list[str], writers: int, written: int, size: int) -> int:
    """Append until ``size`` messages in all, from ``writers`` threads each to random streams."""
    lock = threading.Lock()
    count = [written]

    def run() -> None:
        with requests.Session() as http:
            while True:
                with lock:
                    if count[0] >= size:
                        return
                    count[0] += 1
                    number = count[0]
                url = writer.stream_url(random.choice(names))
                answer = http.post(url, data=f"message {number}", headers=TEXT, timeout=30)
                assert answer.status_code in (200, 204), answer.text

    threads = [threading.Thread(target=run) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return count[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20,200,1000", help="history sizes (appends), accumulating")
    parser.add_argument("--streams", type=int, default=1, help="streams the history is written to")
    parser.add_argument("--writers", type=int, default=1, help="concurrent writers, each to random streams")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="takeover-"))
    moto = MotoServer().start(work)
    rows: list[dict[str, object]] = []
    try:
        moto.create_bucket("takeover-bench")
        args = [*moto.server_args("s3://takeover-bench/shard"), "--durability", "delta", "--log-format", "json"]
        writer = ServerProcess(work / "writer", [*args, "--node-id", "writer"]).start()
        names = [f"history-{index}" for index in range(options.streams)]
        for name in names:
            requests.put(writer.stream_url(name), headers=TEXT, timeout=30)
        written = 0
        for index, size in enumerate(int(size) for size in options.sizes.split(",")):
            progress(f"appending up to {size} messages")
            written = _write(writer, names, options.writers, written, size)
            writer.kill()
            cold = take_over(args, work, f"cold{index}", spare=False)
            spare = take_over(args, work, f"spare{index}", spare=True)
            rows.append({"appends": size, "cold": cold, "spare": spare})
            progress(f"{size} appends: cold {cold}, spare {spare}")
            again = [*args, "--node-id", f"writer{index}", "--take-over", "ask", "--take-over-timeout-s", "0"]
            writer = ServerProcess(work / f"writer{index}", again).start()
        writer.kill()
    finally:
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{options.streams} streams, {options.writers} writers")
    print("| appends | cold: ready ms | claimed | recovered | spare: ready ms | claimed | recovered |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        cold, spare = row["cold"], row["spare"]
        assert isinstance(cold, dict) and isinstance(spare, dict)
        steps = [run.get(step, "?") for run in (cold, spare) for step in ("took the storage over", "recovered")]
        print(
            f"| {row['appends']} | {cold['ready_ms']} | {steps[0]} | {steps[1]} | {spare['ready_ms']} "
            f"| {steps[2]} | {steps[3]} |"
        )
    SCRATCH_DIR.mkdir(parents=True, exist_ok=True)
    shape = {"streams": options.streams, "writers": options.writers}
    record = {"rows": rows, "shape": shape, "conditions": conditions(REPO)}
    (SCRATCH_DIR / "takeover.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
