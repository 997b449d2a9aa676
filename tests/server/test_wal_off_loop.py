"""No write or sync of the WAL on the event loop's thread, through real requests.

A real server in this process (``inprocess.serving``), its WAL's system calls recorded
(``wal_support.DiskCalls``) and its acknowledgements too (``Acknowledgements.mark_durable``,
which runs on the loop's thread): a create, a lone append after an idle moment, sequential
appends, a long-poll woken by an append, concurrent appends (batches), segment cuts by the
flusher, and the shutdown. None of the calls may run on the thread the acknowledgements
ran on; every write runs on the sync thread.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import requests
from inprocess import serving
from servers import live_readers, wait_for
from wal_support import Ack, DiskCalls

from durable_streams_server import ServerConfig
from durable_streams_server.storage.acks import Acknowledgements
from durable_streams_server.storage.sync_policy import THREAD_NAME

TEXT = {"Content-Type": "text/plain"}


def test_requests_never_write_or_sync_the_wal_on_the_loop_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = DiskCalls(tmp_path / "wal").install(monkeypatch)
    real_mark = Acknowledgements.mark_durable

    def mark_durable(self: Acknowledgements, lsn: int) -> None:
        if lsn > self.durable_lsn:
            calls.ack(lsn)
        real_mark(self, lsn)

    monkeypatch.setattr(Acknowledgements, "mark_durable", mark_durable)

    def directory_syncs() -> int:  # (a new segment syncs the directory: at start, and at each cut)
        return sum(1 for call in calls.calls if call.name == "fsync" and call.path == str(tmp_path / "wal"))

    with serving(ServerConfig(data_dir=tmp_path, flush_interval_ms=50)) as (url, _), requests.Session() as http:
        stream = f"{url}/v1/stream/off-loop"
        assert http.put(stream, headers=TEXT).status_code == 201
        time.sleep(0.05)  # (an idle moment before a lone append: part of the scenario, not a wait)
        assert http.post(stream, data=b"a", headers=TEXT).status_code == 204
        for _ in range(20):
            assert http.post(stream, data=b"b", headers=TEXT).status_code == 204
        tail = http.head(stream).headers["Stream-Next-Offset"]
        answers: list[requests.Response] = []
        poller = threading.Thread(
            target=lambda: answers.append(
                requests.get(stream, params={"offset": tail, "live": "long-poll"}, timeout=30)
            )
        )
        poller.start()
        wait_for(lambda: live_readers(url, "long_poll") == 1, timeout_s=30, interval_s=0.01)  # (parked)
        assert http.post(stream, data=b"w", headers=TEXT).status_code == 204
        poller.join(timeout=30)
        assert answers and (answers[0].status_code, answers[0].content) == (200, b"w")

        def appender() -> None:
            with requests.Session() as own:
                for _ in range(15):
                    assert own.post(stream, data=b"c", headers=TEXT).status_code == 204

        threads = [threading.Thread(target=appender) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        cuts = directory_syncs()
        assert http.post(stream, data=b"d", headers=TEXT).status_code == 204
        wait_for(lambda: directory_syncs() > cuts, timeout_s=30, interval_s=0.01)  # (the flusher's next segment cut)
        assert http.get(stream, params={"offset": "-1"}).content == b"a" + b"b" * 20 + b"w" + b"c" * 60 + b"d"

    loop_threads = {event.thread for event in calls.events if isinstance(event, Ack)}
    assert len(loop_threads) == 1  # (every acknowledgement on the loop's thread)
    assert [call for call in calls.calls if call.thread in loop_threads] == []
    writes = [call for call in calls.calls if call.name in ("pwritev", "pwrite")]
    assert len(writes) >= 10 and {call.thread_name for call in writes} == {THREAD_NAME}
