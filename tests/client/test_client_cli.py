"""The ``durable-streams`` command line, run as real subprocesses against a real server."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests
from client_support import REPO_ROOT, cli, unique
from servers import ServerProcess, live_readers, wait_for

from pyspark_durable_streams.client import Client
from pyspark_durable_streams.client.cli import build_parser

SUBCOMMANDS = ["create", "append", "cat", "tail", "head", "retention", "rm", "ls", "snapshot", "lag", "bootstrap"]


def test_every_subcommand_is_covered_here() -> None:
    parser = build_parser()
    actions = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    assert sorted(actions[0].choices) == sorted(SUBCOMMANDS)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", [None, *SUBCOMMANDS])
def test_help(command: str | None) -> None:
    result = cli(*([command] if command else []), "--help")
    assert result.returncode == 0, result.stderr
    assert b"usage: durable-streams" in result.stdout and b"--url" in result.stdout


def test_create_append_cat_head_rm(ours: ServerProcess, tmp_path: Path) -> None:
    path = f"v1/stream/{unique('cli')}"
    created = cli("create", path, "--content-type", "text/plain", "--data", "one\n", url=ours.url)
    assert created.returncode == 0 and created.stdout.startswith(b"created "), created.stderr
    assert cli("create", path, "--content-type", "text/plain", url=ours.url).stdout.startswith(b"exists ")
    assert cli("append", path, url=ours.url, stdin=b"two\n").returncode == 0
    big = tmp_path / "input.txt"
    big.write_bytes(b"".join(f"line {i}\n".encode() for i in range(200_000)))  # ~2 MB: several requests
    appended = cli("append", path, str(big), "--chunk-size", "262144", "--progress", url=ours.url)
    assert appended.returncode == 0, appended.stderr
    assert b"appended" in appended.stderr and b"100%" in appended.stderr  # summary and tqdm bar
    cat = cli("cat", path, "--print-offset", url=ours.url)
    assert cat.returncode == 0
    assert cat.stdout == b"one\ntwo\n" + big.read_bytes()
    with Client(ours.url) as client, client.stream(path).read() as reader:
        messages = [message.data for message in reader]
    # (a text stream's chunks end at line ends: no message, hence no row of a reader, holds half a line)
    assert len(messages) > 2 + 1 and all(len(data) <= 262144 and data.endswith(b"\n") for data in messages)
    assert b"".join(messages[2:]) == big.read_bytes()
    assert b"next-offset " in cat.stderr
    head = cli("head", path, "--json", url=ours.url)
    meta = json.loads(head.stdout)
    assert meta["content_type"] == "text/plain" and meta["closed"] is False
    assert meta["next_offset"] == cat.stderr.decode().split()[-1]
    assert b"content_type: text/plain" in cli("head", path, url=ours.url).stdout
    single = cli("append", path, url=ours.url, stdin=b"three\n")
    assert b"appended 1 message in 1 request (" in single.stderr, single.stderr
    assert cli("rm", path, url=ours.url).returncode == 0
    missing = cli("rm", path, url=ours.url)
    assert missing.returncode == 1 and b"404" in missing.stderr and path.encode() in missing.stderr
    assert cli("rm", path, "--force", url=ours.url).returncode == 0


def test_json_lines_and_full_urls_and_missing_server(ours: ServerProcess) -> None:
    url = f"{ours.url}/v1/stream/{unique('cli-json')}"
    assert cli("create", url, "-t", "application/json").returncode == 0  # a full URL needs no --url
    lines = b"".join(json.dumps({"i": i}).encode() + b"\n" for i in range(1000)) + b"\n[1,2]\n"
    appended = cli("append", url, "--json-lines", "--close", stdin=lines)
    assert appended.returncode == 0 and b"appended 1001 messages" in appended.stderr, appended.stderr
    out = cli("cat", url).stdout.decode().splitlines()
    assert [json.loads(line) for line in out] == [{"i": i} for i in range(1000)] + [[1, 2]]
    assert json.loads(cli("head", url, "--json").stdout)["closed"] is True
    bad = cli("append", url, "--json-lines", stdin=b"{not json}\n")
    assert bad.returncode == 1 and b"line 1 is not JSON" in bad.stderr
    nowhere = cli("cat", "v1/stream/x")
    assert nowhere.returncode == 2 and b"DURABLE_STREAMS_URL" in nowhere.stderr


def test_a_newcomers_mistakes_get_errors_that_say_what_to_do(ours: ServerProcess, tmp_path: Path) -> None:
    """A stream named by one segment (which names a bucket), an append to a stream that does not
    exist, and a server that is not there: each an exit code of 1 or 2 and one line saying what
    to do, with nothing created."""
    name = unique("one-segment")
    one_segment = cli("create", name, url=ours.url)
    assert one_segment.returncode == 2, one_segment.stderr
    assert f"v1/stream/{name}".encode() in one_segment.stderr and b"names a bucket" in one_segment.stderr
    assert requests.head(f"{ours.url}/{name}", timeout=10).status_code == 404  # (no bucket either)
    listed = cli("ls", name, url=ours.url)
    assert listed.returncode == 1 and b"404" in listed.stderr  # (and no bucket was created)
    missing = cli("append", f"v1/stream/{name}", url=ours.url, stdin=b"{}")
    assert missing.returncode == 1
    hint = f"create it first: durable-streams create v1/stream/{name} --content-type text/plain, application/json"
    assert hint.encode() in missing.stderr, missing.stderr
    missing_lines = cli("append", f"v1/stream/{name}", "--json-lines", url=ours.url, stdin=b"{}\n")
    hint = f"create it first: durable-streams create v1/stream/{name} --content-type application/json)"
    assert missing_lines.returncode == 1 and hint.encode() in missing_lines.stderr, missing_lines.stderr
    no_scheme = cli("head", "v1/stream/x", url=ours.url.removeprefix("http://"))
    assert no_scheme.returncode == 2, no_scheme.stderr
    assert f"a URL starts with http:// or https://, e.g. {ours.url}".encode() in no_scheme.stderr
    negative = cli("tail", "v1/stream/x", "-n", "-3", url=ours.url)
    assert negative.returncode == 2 and b"argument -n/--lines: must be 0 or more, got -3" in negative.stderr
    zero_chunks = cli("append", "v1/stream/x", "--chunk-size", "0", url=ours.url, stdin=b"x")
    assert zero_chunks.returncode == 2 and b"argument --chunk-size: must be 1 or more, got 0" in zero_chunks.stderr
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    refused = cli("head", "v1/stream/x", url=f"http://127.0.0.1:{port}")
    assert refused.returncode == 1
    assert refused.stderr.decode().strip().startswith(f"durable-streams: cannot connect to http://127.0.0.1:{port}")
    assert b"Max retries" not in refused.stderr and len(refused.stderr.splitlines()) == 1, refused.stderr


def test_tail_follow_prints_lines_as_they_arrive(ours: ServerProcess) -> None:
    path = f"v1/stream/{unique('cli-tail')}"
    stream = Client(ours.url).stream(path)
    stream.create("application/json", data='["history"]')
    env = {**os.environ, "DURABLE_STREAMS_URL": ours.url}
    command = [sys.executable, "-m", "pyspark_durable_streams.client.cli", "tail", "-f", path]
    with subprocess.Popen(command, stdout=subprocess.PIPE, env=env, cwd=REPO_ROOT) as proc:
        assert proc.stdout is not None
        watchdog = threading.Timer(120, proc.kill)  # a stuck tail ends the test (EOF) instead of hanging it
        watchdog.start()
        # let it print the last messages (like tail -f) and connect after them
        wait_for(lambda: live_readers(ours.url, "sse") >= 1, message=lambda: "(the tail never followed)")
        for i in range(3):
            stream.append_json({"live": i})
        lines = [json.loads(line) for line in (proc.stdout.readline() for _ in range(4)) if line]
        watchdog.cancel()
        proc.send_signal(signal.SIGKILL)
    assert lines == ["history", {"live": 0}, {"live": 1}, {"live": 2}]


def test_tail_without_follow_and_long_poll_follow_until_closed(ours: ServerProcess) -> None:
    path = f"v1/stream/{unique('cli-tail-eof')}"
    stream = Client(ours.url).stream(path)
    stream.create("text/plain", data="a")
    stream.close("b")
    assert cli("tail", path, "--offset", "-1", url=ours.url).stdout == b"ab"
    followed = cli("tail", path, "-f", "--live", "long-poll", "--offset", "-1", url=ours.url, timeout=10)
    assert followed.returncode == 0 and followed.stdout == b"ab"  # EOF ends a follow


def test_ls_snapshot_and_bootstrap(ours: ServerProcess, tmp_path: Path) -> None:
    client = Client(ours.url)
    bucket = client.bucket(unique("cli-bkt"))
    bucket.create()
    stream = bucket.stream("events")
    stream.create("application/json", data='[{"n":1},{"n":2}]')
    bucket.stream("other").create("text/plain")
    listing = cli("ls", bucket.bucket_id, url=ours.url)
    assert listing.stdout.decode().split() == ["events", "other"]
    long = cli("ls", bucket.bucket_id, "--long", "--prefix", "ev", url=ours.url).stdout.decode()
    assert long.startswith("events\tOpen\tapplication/json\t")
    path = f"{bucket.bucket_id}/events"
    offset = stream.metadata().next_offset
    published = cli("snapshot", "publish", path, "--offset", offset, url=ours.url, stdin=b'{"total":3}')
    assert published.returncode == 0, published.stderr
    stream.append_json({"n": 3})
    got = cli("snapshot", "get", path, url=ours.url)
    assert got.stdout == b'{"total":3}' and offset.encode() in got.stderr
    boot = cli("bootstrap", path, "--snapshot-file", str(tmp_path / "snap"), url=ours.url)
    assert boot.returncode == 0 and boot.stdout == b'{"n":3}\n'
    assert (tmp_path / "snap").read_bytes() == b'{"total":3}'
    assert f"snapshot-offset {offset}".encode() in boot.stderr


def test_json_lines_with_a_bad_line_appends_nothing(ours: ServerProcess, tmp_path: Path) -> None:
    """The whole input is checked first: a bad line 3 names its number and appends neither line 1 nor 2."""
    path = f"v1/stream/{unique('cli-bad-lines')}"
    assert cli("create", path, "-t", "application/json", url=ours.url).returncode == 0
    lines = b'{"ok":1}\n{"ok":2}\n{broken\n{"ok":4}\n'
    piped = cli("append", path, "--json-lines", url=ours.url, stdin=lines)
    with Client(ours.url) as client:
        assert [message.json() for message in client.stream(path).read("-1")] == []
    assert piped.returncode == 1 and b"line 3 is not JSON" in piped.stderr and b"nothing was appended" in piped.stderr
    (tmp_path / "lines.jsonl").write_bytes(lines)
    from_file = cli("append", path, str(tmp_path / "lines.jsonl"), "--json-lines", url=ours.url)
    assert from_file.returncode == 1 and b"line 3 is not JSON" in from_file.stderr
    with Client(ours.url) as client:
        assert list(client.stream(path).read("-1")) == []
    (tmp_path / "lines.jsonl").write_bytes(lines.replace(b"{broken", b'{"ok":3}'))
    assert cli("append", path, str(tmp_path / "lines.jsonl"), "--json-lines", url=ours.url).returncode == 0
    assert [json.loads(line) for line in cli("cat", path, url=ours.url).stdout.splitlines()] == [
        {"ok": i} for i in range(1, 5)
    ]


def test_tail_prints_the_last_messages_like_tail(ours: ServerProcess) -> None:
    path = f"v1/stream/{unique('cli-tail-last')}"
    with Client(ours.url) as client:
        client.stream(path).create("application/json")
        client.stream(path).append_json_batch([{"n": i} for i in range(15)])
    last_ten = cli("tail", path, url=ours.url)
    assert last_ten.returncode == 0, last_ten.stderr
    assert [json.loads(line)["n"] for line in last_ten.stdout.splitlines()] == list(range(5, 15))
    last_three = cli("tail", path, "-n", "3", url=ours.url)
    assert [json.loads(line)["n"] for line in last_three.stdout.splitlines()] == [12, 13, 14]
    assert cli("tail", path, "--offset", "now", url=ours.url).stdout == b""


def test_cat_shows_progress_on_a_terminal_only(ours: ServerProcess) -> None:
    """stderr a terminal (a pty): a tqdm bar counting messages up to the tail; stderr a pipe: no bar."""
    import fcntl
    import pty
    import struct
    import termios

    path = f"v1/stream/{unique('cli-cat-progress')}"
    with Client(ours.url) as client:
        client.stream(path).create("application/json")
        client.stream(path).append_json_batch([{"n": i} for i in range(250)])
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal's size
    shown: list[bytes] = []

    def drain() -> None:
        with contextlib.suppress(OSError):  # EIO once the child's side is closed and drained
            while chunk := os.read(controller, 65536):
                shown.append(chunk)

    env = {**os.environ, "DURABLE_STREAMS_URL": ours.url, "NO_PROXY": "127.0.0.1,localhost"}
    command = [sys.executable, "-m", "pyspark_durable_streams.client.cli", "cat", path]
    reader = threading.Thread(target=drain)
    reader.start()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=terminal, env=env, cwd=REPO_ROOT) as proc:
        os.close(terminal)
        stdout, _ = proc.communicate(timeout=30)
    reader.join(timeout=10)
    os.close(controller)
    progress = b"".join(shown)
    assert proc.returncode == 0 and len(stdout.splitlines()) == 250
    assert b"250/250" in progress and b"msg" in progress, progress
    piped = cli("cat", path, url=ours.url)
    assert piped.returncode == 0 and piped.stderr == b""


def test_lag_shows_each_named_consumer_per_stream(ours: ServerProcess) -> None:
    path = f"v1/stream/{unique('cli-lag')}"
    consumer = unique("cli-consumer")
    with Client(ours.url) as client:
        stream = client.stream(path)
        stream.create("text/plain")
        for message in (b"a", b"bb", b"ccc"):
            stream.append(message)
        client.consumers().record(consumer, {path.removeprefix("v1/stream/"): f"{1:016d}_{0:016d}"})
    table = cli("lag", "--consumer", consumer, url=ours.url)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.decode().splitlines()
    assert header.split("\t") == ["consumer", "stream", "offset", "lag_messages", "lag_bytes", "lag_seconds"]
    fields = row.split("\t")
    assert fields[:5] == [consumer, path, f"{1:016d}_{0:016d}", "2", "5"] and float(fields[5]) >= 0
    as_json = cli("lag", "--consumer", consumer, "--json", url=ours.url)
    (line,) = as_json.stdout.decode().splitlines()
    assert json.loads(line)["lag_bytes"] == 5 and json.loads(line)["consumer"] == consumer
    assert cli("lag", "--consumer", "nobody-at-all", url=ours.url).stdout.decode().splitlines()[1:] == []


def test_append_if_match_appends_at_that_tail_only(ours: ServerProcess) -> None:
    path = f"v1/stream/{unique('cli-if-match')}"
    assert cli("create", path, "--content-type", "text/plain", "--data", "one\n", url=ours.url).returncode == 0
    tail = "0000000000000001_0000000000000000"
    appended = cli("append", path, "--if-match", tail, url=ours.url, stdin=b"two\n")
    assert appended.returncode == 0, appended.stderr
    assert b"next-offset 0000000000000002_0000000000000000" in appended.stderr
    stale = cli("append", path, "--if-match", tail, url=ours.url, stdin=b"lost\n")
    assert stale.returncode == 1
    assert stale.stderr.decode().strip().splitlines() == [
        "durable-streams append: precondition failed: the stream's tail is 0000000000000002_0000000000000000, "
        f"not {tail}; nothing appended"
    ]
    closed = cli("append", path, "--if-match", "0000000000000002_0000000000000000", "--close", url=ours.url, stdin=b"")
    assert closed.returncode == 0, closed.stderr
    assert cli("cat", path, url=ours.url).stdout == b"one\ntwo\n"
    assert json.loads(cli("head", path, "--json", url=ours.url).stdout)["closed"] is True


def test_retention_limits_on_create_shown_changed_and_refused(ours: ServerProcess) -> None:
    url = f"{ours.url}/v1/stream/{unique('cli-retention')}"
    created = cli("create", url, "-t", "text/plain", "--max-messages", "100", "--max-age", "3600")
    assert created.returncode == 0, created.stderr
    shown = cli("retention", url)
    assert (shown.returncode, shown.stdout) == (0, b"max_age_seconds=3600 max_messages=100\n")
    head = json.loads(cli("head", url, "--json").stdout)
    assert head["retention"] == {"max_age_seconds": 3600, "max_messages": 100}
    assert head["earliest_offset"] == "0000000000000000_0000000000000000"
    assert b'retention: {"max_age_seconds": 3600, "max_messages": 100}\n' in cli("head", url).stdout  # (JSON)

    changed = cli("retention", url, "--max-messages", "none", "--max-bytes", "1048576")
    assert (changed.returncode, changed.stdout) == (0, b"max_age_seconds=3600 max_bytes=1048576\n")
    refused = cli("retention", url, "--max-bytes", "0")
    assert refused.returncode == 2 and b"--max-bytes" in refused.stderr
    removed = cli("retention", url, "--max-age", "none", "--max-bytes", "none")
    assert (removed.returncode, removed.stdout) == (0, b"no retention limits\n")
