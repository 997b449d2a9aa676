"""Starts that would leave acknowledged WAL records behind: refused, unless given up for that start.

A WAL server acknowledges an append once its record is fsynced in ``<data-dir>/wal``; it is in
Delta only after the next flush. Each test here holds 50 acknowledged appends in the WAL alone
(a flush interval of ten minutes), kills the server with ``kill -9`` and starts again in a way
that would not replay that WAL:

- with ``--durability delta`` on the same data dir (which reads no WAL): refused, naming the
  records, the data dir and the ways out (``--durability wal`` drains it; ``--take-over force``
  gives it up for that start, moving the log aside so no later start replays it);
- with the same ``--node-id`` on a fresh data dir (a lost disk): refused like another node
  (``storage.ownership``: the claim records the data dir's WAL id), until the old data dir is back
  or ``--take-over force`` gives the records up (logged).

And the starts that must stay allowed: a WAL server on a delta server's data dir, and a delta
server's node id on a fresh data dir (a delta owner acknowledged only what Delta holds).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from servers import ServerProcess, read_all, session

APPENDS = 50
RECORDS = APPENDS + 2
"""What the WAL holds: the appends, the stream's creation and the server's webhook signing keys."""
HOLD_IN_WAL = ["--flush-interval-ms", "600000"]
NODE = ["--node-id", "n1"]
TEXT = {"Content-Type": "text/plain"}


@pytest.fixture
def storage(tmp_path: Path) -> list[str]:
    """The options naming the tests' storage location (one local Delta table, outside the data dirs)."""
    return ["--storage-uri", str(tmp_path / "storage")]


def _acknowledged(server: ServerProcess) -> bytes:
    """Create stream ``s`` and append ``APPENDS`` messages, each acknowledged (204); all of them."""
    http = session()
    assert http.put(server.stream_url("s"), headers=TEXT, timeout=30).status_code == 201
    messages = [b"m%02d" % i for i in range(APPENDS)]
    for message in messages:
        assert http.post(server.stream_url("s"), data=message, headers=TEXT, timeout=30).status_code == 204
    return b"".join(messages)


def _killed(start: Callable[..., ServerProcess], *args: str) -> tuple[ServerProcess, bytes]:
    """A server started with ``args`` that acknowledged ``APPENDS`` appends, killed with ``kill -9``;
    what it acknowledged."""
    server = start(*args)
    acknowledged = _acknowledged(server)
    server.kill()
    return server, acknowledged


def _lost_disk(
    start: Callable[..., ServerProcess], storage: list[str], tmp_path: Path
) -> tuple[ServerProcess, bytes, Path]:
    """``_killed`` with node id ``n1``, holding its appends in the WAL, and its data dir then lost: the
    server, set to start on a fresh data dir; what it acknowledged; its old data dir."""
    server, acknowledged = _killed(start, *storage, *NODE, *HOLD_IN_WAL)
    old_data_dir, server.data_dir = server.data_dir, tmp_path / "fresh"
    return server, acknowledged, old_data_dir


def _started(server: ServerProcess, *args: str) -> ServerProcess:
    """``server`` started again, with ``args`` instead of its own."""
    server.extra_args = list(args)
    return server.start()


def _read(server: ServerProcess) -> bytes | int:
    """The stream's whole content, or the status of the refusal (404: the stream is gone)."""
    http = session()
    answer = http.head(server.stream_url("s"), timeout=30)
    return read_all(http, server.stream_url("s")) if answer.status_code == 200 else answer.status_code


def _refused(server: ServerProcess, *args: str) -> str:
    """Start ``server`` with ``args`` instead of its own; it must exit non-zero. Its log."""
    server.extra_args = list(args)
    with pytest.raises(RuntimeError, match="process exited with"):
        server.start()
    assert server.proc is not None and server.proc.returncode != 0
    return server.log_text().rsplit("--- start", 1)[-1]


def _one_line(log: str, text: str) -> str:
    """The log line holding ``text`` (one line: logfmt escapes the message's newlines)."""
    lines = [line for line in log.splitlines() if text in line]
    assert lines, log[-3000:]
    return lines[0]


def test_a_delta_start_on_a_wal_with_acknowledged_records_is_refused_and_wal_drains_it(
    server_factory: Callable[..., ServerProcess], storage: list[str]
) -> None:
    server, acknowledged = _killed(server_factory, *storage, *HOLD_IN_WAL)

    line = _one_line(_refused(server, *storage, "--durability", "delta"), "start refused")
    assert f"{RECORDS} acknowledged records" in line, line
    assert str(server.data_dir.resolve() / "wal") in line and "--durability wal" in line, line
    assert "--take-over force" in line, line

    _started(server, *storage)  # WAL durability: replays the records, flushes them on a clean stop
    assert _read(server) == acknowledged
    server.stop()
    _started(server, *storage, "--durability", "delta")
    assert _read(server) == acknowledged


def test_take_over_force_gives_the_wal_up_for_that_start_and_no_later_start_replays_it(
    server_factory: Callable[..., ServerProcess], storage: list[str]
) -> None:
    server, _ = _killed(server_factory, *storage, *HOLD_IN_WAL)

    _started(server, *storage, "--durability", "delta", "--take-over", "force")
    line = _one_line(server.log_text(), "gave up the write-ahead log")
    assert f"records={RECORDS}" in line, line
    assert _read(server) == 404  # (given up: its creation was in the WAL only)
    aside = [path.name for path in server.data_dir.iterdir() if path.name.startswith("wal.given-up-")]
    assert len(aside) == 1, sorted(path.name for path in server.data_dir.iterdir())
    http = session()
    assert http.put(server.stream_url("s"), headers=TEXT, timeout=30).status_code == 201
    assert http.post(server.stream_url("s"), data=b"after", headers=TEXT, timeout=30).status_code == 204
    server.kill()

    _started(server, *storage)  # WAL durability again, nothing given up this time
    assert _read(server) == b"after"


def test_a_delta_start_on_a_data_dir_naming_no_table_makes_none_where_its_table_is_gone(
    server_factory: Callable[..., ServerProcess], storage: list[str], tmp_path: Path
) -> None:
    """A data dir from before ``wal-table`` (the file removed), its WAL holding acknowledged records,
    its table gone (moved aside): a delta start is refused before it makes a table there (a refused
    start changes nothing); ``--take-over force`` gives the records up, and that start makes one."""
    server, _ = _killed(server_factory, *storage, *HOLD_IN_WAL)
    (server.data_dir / "wal-table").unlink()
    table = Path(storage[1])
    table.rename(tmp_path / "aside")

    line = _one_line(_refused(server, *storage, "--durability", "delta"), "start refused")
    assert f"holds {RECORDS} records" in line and "where no table is" in line, line
    assert not table.exists(), sorted(str(path) for path in table.rglob("*"))

    _started(server, *storage, "--durability", "delta", "--take-over", "force")
    assert _read(server) == 404  # (given up: its creation was in the WAL only)
    assert (table / "streams" / "_delta_log").is_dir()  # (the streams table of --storage-uri)


def test_a_wal_start_on_a_delta_servers_data_dir_loses_nothing(
    server_factory: Callable[..., ServerProcess], storage: list[str]
) -> None:
    server, acknowledged = _killed(server_factory, *storage, "--durability", "delta")
    _started(server, *storage, *HOLD_IN_WAL)
    assert _read(server) == acknowledged


def test_the_same_node_on_a_fresh_data_dir_is_refused_while_its_wal_holds_acknowledged_records(
    server_factory: Callable[..., ServerProcess], storage: list[str], tmp_path: Path
) -> None:
    server, acknowledged, old_data_dir = _lost_disk(server_factory, storage, tmp_path)
    line = _one_line(_refused(server, *storage, *NODE), "start refused")
    assert "owned by this node ('n1') with another write-ahead log" in line, line
    assert str(old_data_dir.resolve()) in line and "--take-over force" in line, line

    server.data_dir = old_data_dir  # the disk is back: its WAL is replayed
    _started(server, *storage, *NODE, *HOLD_IN_WAL)
    assert _read(server) == acknowledged


def test_the_same_node_on_a_fresh_data_dir_gives_the_lost_wal_up_with_take_over_force(
    server_factory: Callable[..., ServerProcess], storage: list[str], tmp_path: Path
) -> None:
    server, _, old_data_dir = _lost_disk(server_factory, storage, tmp_path)
    _started(server, *storage, *NODE, "--take-over", "force")
    line = _one_line(server.log_text(), "took the storage over")
    assert "level=warning" in line and "given_up=" in line and str(old_data_dir.resolve()) in line, line
    assert _read(server) == 404
    assert session().put(server.stream_url("s"), headers=TEXT, timeout=30).status_code == 201


def test_a_delta_owner_restarts_on_a_fresh_data_dir_under_its_node_id(
    server_factory: Callable[..., ServerProcess], storage: list[str], tmp_path: Path
) -> None:
    storage = [*storage, *NODE, "--durability", "delta"]
    server, acknowledged = _killed(server_factory, *storage)
    server.data_dir = tmp_path / "fresh"
    server.start()
    assert _read(server) == acknowledged
    assert "took the storage over" not in server.log_text()
