"""Storage maintenance at work on a real server: state checkpoints bound what a restart
reads, purges survive kill -9, a pass with nothing new writes nothing, and no maintenance
step changes an answer or loses an acknowledged append while writers and readers run."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import requests
from deltalake import DeltaTable
from servers import ServerProcess, flushed, read_all, session, wait_for

from durable_streams_server.storage.history_reader import MAX_OPENS_PER_READ

TEXT = {"Content-Type": "text/plain"}
FAST = ("--flush-interval-ms", "20", "--tail-cache-bytes", "0", "--vacuum-retention-hours", "0")


def _recovered(server: ServerProcess) -> dict[str, int]:
    line = [line for line in server.log_text().splitlines() if "msg=recovered" in line][-1]
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)}


def _passes(server: ServerProcess) -> list[dict[str, int]]:
    return [
        {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)(?:\s|$)", line)}
        for line in server.log_text().splitlines()
        if "msg=compacted" in line
    ]


def _table_rows(server: ServerProcess) -> list[dict[str, object]]:
    table = DeltaTable(str(server.data_dir / "delta" / "streams"))
    return table.to_pyarrow_table(columns=["stream", "kind", "seq", "lsn"]).to_pylist()


def _tombstones(server: ServerProcess) -> int:
    table = DeltaTable(str(server.data_dir / "delta" / "streams")).to_pyarrow_table(columns=["kind", "meta"])
    return sum(1 for row in table.to_pylist() if row["kind"] == "state" and '"deleted":true' in row["meta"])


def _paced_appends(http: requests.Session, server: ServerProcess, name: str, count: int) -> list[str]:
    """``count`` appends, each flushed to Delta before the next (one commit each)."""
    bodies = []
    for index in range(count):
        bodies.append(f"{name}-{index};")
        assert http.post(server.stream_url(name), headers=TEXT, data=bodies[-1]).status_code == 204
        wait_for(flushed(server), timeout_s=10, interval_s=0.005)
    return bodies


def test_a_restart_reads_the_state_checkpoint_not_every_flush(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*FAST, "--compaction-interval-s", "0")
    http = session()
    assert http.put(server.stream_url("hot"), headers=TEXT).status_code == 201
    # 120 flushes (150 before): a checkpoint is due after 100 (CheckpointPolicy.min_commits),
    # and a restart reading every flush would read 120 state rows, over four times the bound
    bodies = _paced_appends(http, server, "hot", 120)
    server.stop()
    server.start()
    recovered = _recovered(server)
    # a checkpoint was taken after 100 flushes: the restart read its row and the rows after it
    assert recovered["commits_after_state_checkpoint"] <= 25, recovered
    assert recovered["state_rows_read"] <= 27, recovered
    assert read_all(http, server.stream_url("hot")).decode() == "".join(bodies)
    state_rows = [row for row in _table_rows(server) if row["kind"] == "state"]
    assert len(state_rows) > 120  # compaction is off: only the restart's reads were bounded


def test_a_read_over_many_small_files_is_short_and_the_catch_up_complete(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory(*FAST, "--compaction-interval-s", "0")
    http = session()
    assert http.put(server.stream_url("spread"), headers=TEXT).status_code == 201
    # 100 flush files, a message in each: over three times the row groups one read may open
    # (MAX_OPENS_PER_READ, 32), so the first read is cut and the catch-up takes four reads
    # (300 files, ~35 s, dated from when the bound was 128).
    files = 100
    assert files >= 3 * MAX_OPENS_PER_READ
    bodies = _paced_appends(http, server, "spread", files)
    server.stop()
    server.start()  # nothing in memory: every read goes to Delta
    first = http.get(server.stream_url("spread"), params={"offset": "-1"})
    assert first.status_code == 200
    count = first.text.count(";")  # a message per file, at most MAX_OPENS_PER_READ row groups opened per read
    assert 0 < count <= MAX_OPENS_PER_READ < files and first.text == "".join(bodies[:count])
    assert "Stream-Up-To-Date" not in first.headers
    assert read_all(http, server.stream_url("spread")).decode() == "".join(bodies)


def test_deleted_streams_are_purged_after_kill_9_and_restart(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory(*FAST, "--compaction-interval-s", "0")
    http = session()
    for index in range(30):
        url = server.stream_url(f"gone-{index}")
        assert http.put(url, headers=TEXT, data=f"g{index};").status_code == 201
    assert http.put(server.stream_url("kept"), headers=TEXT, data="k;").status_code == 201
    for index in range(30):
        assert http.delete(server.stream_url(f"gone-{index}")).status_code == 204
    wait_for(lambda: _tombstones(server) == 30)
    server.kill()  # the purges were only intended: nothing ran compaction
    server.extra_args = (*FAST, "--compaction-interval-s", "0.5")
    server.start()
    assert _recovered(server)["purges_pending"] == 30
    wait_for(lambda: len(_passes(server)) >= 1, timeout_s=30)
    assert _passes(server)[0]["purged_streams"] == 30
    assert _tombstones(server) == 0
    rows = _table_rows(server)
    assert {row["stream"] for row in rows if row["kind"] != "subscription"} == {"v1/stream/kept"}
    # what stays of the deleted streams is their readers' tombstone (final offset, incarnation), kept
    # for --tombstone-retention-s in the reserved namespace's records, beside the signing keys
    assert {row["stream"] for row in rows if row["kind"] == "subscription"} == {
        "__ds/signing-keys",
        *(f"v1/stream/__ds/tombstones/gone-{index}" for index in range(30)),
    }
    assert http.get(server.stream_url("kept"), params={"offset": "-1"}).text == "k;"
    assert http.get(server.stream_url("gone-3"), params={"offset": "-1"}).status_code == 404
    server.stop()
    server.start()
    assert _recovered(server)["purges_pending"] == 0


def test_passes_under_writers_and_readers_change_no_answer_and_a_pass_with_nothing_new_writes_nothing(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory(*FAST, "--compaction-interval-s", "0.3", "--compaction-target-file-bytes", "20000")
    http = session()
    names = [f"s{index}" for index in range(4)]
    for name in names:
        assert http.put(server.stream_url(name), headers=TEXT).status_code == 201
    stop = threading.Event()
    acknowledged: dict[str, list[str]] = {name: [] for name in names}
    mismatches: list[str] = []

    def write(name: str) -> None:
        writer = session()
        while not stop.is_set():
            body = f"{name}:{len(acknowledged[name])}:" + "x" * 200 + ";"
            assert writer.post(server.stream_url(name), headers=TEXT, data=body).status_code == 204
            acknowledged[name].append(body)

    def read(name: str) -> None:
        reader = session()
        while not stop.is_set():
            known = "".join(acknowledged[name])
            text = read_all(reader, server.stream_url(name)).decode()
            if not text.startswith(known):
                mismatches.append(name)

    threads = [threading.Thread(target=work, args=(name,)) for name in names for work in (write, read)]
    for thread in threads:
        thread.start()
    wait_for(lambda: sum(pass_["bins"] for pass_ in _passes(server)) >= 4, timeout_s=60)
    stop.set()
    for thread in threads:
        thread.join()
    assert mismatches == []
    wait_for(flushed(server))
    for name in names:
        assert read_all(http, server.stream_url(name)).decode() == "".join(acknowledged[name])

    # settle: passes until one finds nothing new, then the next must write nothing
    wait_for(lambda: _passes(server)[-1]["bins"] == 0, timeout_s=30)
    files = {uri for uri in DeltaTable(str(server.data_dir / "delta" / "streams")).file_uris()}
    count = len(_passes(server))
    wait_for(lambda: len(_passes(server)) >= count + 2, timeout_s=30)
    assert [pass_["bins"] for pass_ in _passes(server)[count:]] == [0] * (len(_passes(server)) - count)
    assert set(DeltaTable(str(server.data_dir / "delta" / "streams")).file_uris()) == files
    for name in names:
        assert read_all(http, server.stream_url(name)).decode() == "".join(acknowledged[name])
