"""A second server on the data directory another one serves from, as an operator starts one by
mistake (``make serve`` twice, another ``--port``): real processes, local storage.

By every id the directory keeps (node id, WAL id) the second is the first restarting, so
ownership alone would let it take the storage back while the first still writes its WAL
(``storage/data_dir_lock.py``). It must be refused before it reads anything, and the first
must lose nothing: every append it acknowledged, before, during and after the attempt, is in
its history in order, and after a restart.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import requests
from servers import ServerProcess, read_json

pytestmark = pytest.mark.slow

JSON = {"Content-Type": "application/json"}


def _values(server: ServerProcess, name: str) -> list[int]:
    return [item["n"] for item in read_json(server.stream_url(name))]


def _append_until(server: ServerProcess, name: str, stop: threading.Event, acked: list[int], other: list[str]) -> None:
    """Appends ``{"n": i}`` back to back until ``stop``: the acknowledged ``i``s, the other answers."""
    http = requests.Session()
    n = 0
    while not stop.is_set():
        answer = http.post(server.stream_url(name), data=b'{"n": %d}' % n, headers=JSON, timeout=30)
        (acked if answer.status_code in (200, 204) else other).append(n if answer.ok else answer.text)
        n += 1


@pytest.mark.parametrize("durability", ["wal", "delta"])
def test_a_second_server_on_the_same_data_dir_is_refused_and_the_first_loses_nothing(
    tmp_path: Path, durability: str
) -> None:
    data_dir = tmp_path / "data"
    first = ServerProcess(data_dir, ["--durability", durability]).start()
    second = ServerProcess(data_dir, ["--durability", durability])  # (another port, the same directory)
    try:
        assert requests.put(first.stream_url("s"), headers=JSON, timeout=30).status_code == 201
        stop, acked, other = threading.Event(), list[int](), list[str]()
        writer = threading.Thread(target=_append_until, args=(first, "s", stop, acked, other), daemon=True)
        writer.start()
        time.sleep(0.5)
        with pytest.raises(RuntimeError) as refused:
            second.start()
        assert second.proc is not None and second.proc.returncode == 3
        assert f"is in use by another server (pid {first.proc.pid if first.proc else -1}, " in str(refused.value)
        during = len(acked)
        time.sleep(2.5)  # (past the first's owner watch and its flushes: nothing fenced it)
        stop.set()
        writer.join(60)
        assert other == [] and len(acked) > during > 0
        assert requests.get(f"{first.url}/readyz", timeout=30).status_code == 200
        assert _values(first, "s") == acked == list(range(len(acked)))
        first.restart()  # (a clean stop lets the lock go; the restart takes its storage back)
        assert _values(first, "s") == acked
    finally:
        second.kill()
        first.kill()


def test_a_killed_server_leaves_no_lock_behind(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    crashed = ServerProcess(data_dir).start()
    assert requests.put(crashed.stream_url("s"), headers=JSON, timeout=30).status_code == 201
    for n in range(20):
        assert requests.post(crashed.stream_url("s"), data=b'{"n": %d}' % n, headers=JSON, timeout=30).ok
    crashed.kill()
    after = ServerProcess(data_dir).start()  # (another process, another port: the lock went with the first)
    try:
        assert _values(after, "s") == list(range(20))
    finally:
        after.kill()
