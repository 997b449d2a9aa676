"""Background compaction: fewer files, identical answers, nothing lost, safe under SIGKILL."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

import requests
from deltalake import DeltaTable
from servers import ServerProcess, flushed, session, wait_for

TEXT = {"Content-Type": "text/plain"}
FAST_FLUSH = ("--flush-interval-ms", "50", "--tail-cache-bytes", "0", "--vacuum-retention-hours", "0")


def _active_files(server: ServerProcess) -> int:
    return len(DeltaTable(str(server.data_dir / "delta" / "streams")).file_uris())


def _compaction_passes(server: ServerProcess) -> list[tuple[int, int]]:
    return [
        (int(a), int(b))
        for a, b in re.findall(r"msg=compacted files_before=(\d+) files_after=(\d+)", server.log_text())
    ]


def _passes_since_start(server: ServerProcess) -> int:
    """Compaction passes logged by the server's current incarnation."""
    current = server.log_text().rsplit(f"--- start {server.starts - 1} ---", 1)[-1]
    return len(re.findall(r"msg=compacted ", current))


def _snapshot_of_answers(http: requests.Session, server: ServerProcess, names: list[str]) -> list[bytes]:
    """Every stream's full history and bootstrap, boundaries normalised (they are random)."""
    answers = []
    for name in names:
        answers.append(http.get(server.stream_url(name), params={"offset": "-1"}).content)
        response = http.get(server.stream_url(name) + "/bootstrap")
        boundary = response.headers["Content-Type"].split("boundary=")[1]
        answers.append(response.content.replace(boundary.encode(), b"BOUNDARY"))
    return answers


def _append_until(
    http: requests.Session, url: str, stop: threading.Event, acknowledged: list[str], attempted: list[str]
) -> None:
    while not stop.is_set():
        body = f"m{len(attempted)};"
        attempted.append(body)
        try:
            response = http.post(url, headers=TEXT, data=body)
        except requests.RequestException:
            return  # the server was killed: this request's outcome is unknown
        if response.status_code == 204:
            acknowledged.append(body)


def test_compaction_merges_files_and_changes_no_answer(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*FAST_FLUSH, "--compaction-interval-s", "600")
    http = session()
    names = ["alpha", "beta", "gamma"]
    for name in names:
        assert http.put(server.stream_url(name), headers=TEXT).status_code == 201
    for index in range(60):
        for name in names:
            assert http.post(server.stream_url(name), headers=TEXT, data=f"{name}-{index}\r\n--").status_code == 204
        time.sleep(0.01)  # (appends spread over many flushes: time is the workload's pacing)
    snapshot = "0000000000000020_0000000000000000"
    assert http.put(server.stream_url("beta") + f"/snapshot/{snapshot}", data=b"folded").status_code == 204
    wait_for(flushed(server))  # the flusher has written the last records
    files_before = _active_files(server)
    assert files_before > 10, "many small flushes should have left many small files"
    before = _snapshot_of_answers(http, server, names)

    # Restart with a short interval so a pass runs while a writer keeps appending.
    server.stop()
    server.extra_args = (*FAST_FLUSH, "--compaction-interval-s", "0.5")
    server.start()
    assert http.put(server.stream_url("busy"), headers=TEXT).status_code == 201
    stop, acknowledged, attempted = threading.Event(), [], []
    args = (session(), server.stream_url("busy"), stop, acknowledged, attempted)
    writer = threading.Thread(target=_append_until, args=args)
    writer.start()
    wait_for(lambda: len(_compaction_passes(server)) >= 2, timeout_s=30)
    stop.set()
    writer.join()

    assert _active_files(server) < files_before
    assert any(after < before_ for before_, after in _compaction_passes(server))
    assert _snapshot_of_answers(http, server, names) == before
    assert http.get(server.stream_url("busy"), params={"offset": "-1"}).text == "".join(acknowledged)
    assert len(acknowledged) > 10


def test_compaction_purges_deleted_streams_and_retained_history(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*FAST_FLUSH, "--compaction-interval-s", "0.5")
    http = session()
    for name in ("doomed", "kept"):
        assert http.put(server.stream_url(name), headers=TEXT, data="first;").status_code == 201
        for index in range(5):
            assert http.post(server.stream_url(name), headers=TEXT, data=f"m{index};").status_code == 204
    snapshot = "0000000000000004_0000000000000000"
    assert http.put(server.stream_url("kept") + f"/snapshot/{snapshot}", data=b"state").status_code == 204
    assert http.delete(server.stream_url("doomed")).status_code == 204
    passes = len(_compaction_passes(server))
    wait_for(lambda: len(_compaction_passes(server)) >= passes + 2, timeout_s=30)

    rows = DeltaTable(str(server.data_dir / "delta" / "streams")).to_pyarrow_table().to_pylist()
    assert not [row for row in rows if row["stream"] == "v1/stream/doomed"]
    kept = sorted(row["seq"] for row in rows if row["stream"] == "v1/stream/kept" and row["kind"] == "message")
    assert kept == [4, 5]
    assert http.get(server.stream_url("kept"), params={"offset": snapshot}).text == "m3;m4;"
    assert http.get(server.stream_url("kept"), params={"offset": "-1"}).status_code == 410


def test_sigkill_during_compaction_loses_nothing(server_factory: Callable[..., ServerProcess]) -> None:
    """Compaction runs every 200 ms under a steady writer; the server is killed five times."""
    server = server_factory(*FAST_FLUSH, "--compaction-interval-s", "0.2")
    http = session()
    url = server.stream_url("steady")
    assert http.put(url, headers=TEXT).status_code == 201
    acknowledged: list[str] = []
    attempted: list[str] = []
    for round_ in range(5):
        stop = threading.Event()
        writer = threading.Thread(target=_append_until, args=(session(), url, stop, acknowledged, attempted))
        wanted = len(acknowledged) + 11
        writer.start()
        # Kill once this incarnation has compacted at least once (passes keep running every
        # 200 ms under the writer, so the kill lands amid them) and the writer has had 11
        # appends acknowledged: conditions, not a fixed pause a loaded machine may not fill.
        wait_for(lambda: _passes_since_start(server) >= 1 and len(acknowledged) >= wanted, timeout_s=60)  # noqa: B023
        server.kill()
        stop.set()
        writer.join()
        server.start()
        stored = [f"{body};" for body in http.get(url, params={"offset": "-1"}).text.split(";")[:-1]]
        # Every acknowledged append is there, in order; the only extras are requests in
        # flight at a kill (stored, never answered); nothing is there twice.
        assert len(stored) == len(set(stored)), f"round {round_}: duplicates"
        assert set(stored) <= set(attempted), f"round {round_}: unknown data"
        assert [body for body in stored if body in set(acknowledged)] == acknowledged, f"round {round_}"
        assert len(stored) - len(acknowledged) <= round_ + 1
    assert len(_compaction_passes(server)) >= 1
    assert len(acknowledged) > 50
