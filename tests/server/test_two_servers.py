"""Two servers on one storage location, as an operator meets them: real processes on moto's S3.

A second server started by mistake (or a rolling restart that starts the new server before
the old one stops) must not fork or lose acknowledged data (``storage.ownership``):

- without ``--take-over`` it refuses to start, naming the owner, and the owner goes on;
- with ``--take-over`` the owner hands over under load: it refuses new writes, flushes what
  it acknowledged, releases; the new owner serves every acknowledged append exactly once, in
  order, and what a reader of the old owner was given is a prefix of that history;
- the old owner refuses writes afterwards (``NOT_OWNER``);
- with ``--durability delta`` an owner that does not answer is taken over anyway, and its
  next write is refused by the Delta commit itself (fenced), never acknowledged.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from servers import MotoServer, ServerProcess, read_json, wait_for

pytestmark = pytest.mark.slow

JSON = {"Content-Type": "application/json"}


def _storage(moto: MotoServer) -> list[str]:
    bucket = f"owners-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    return moto.server_args(f"s3://{bucket}/ds")


def _history(server: ServerProcess, name: str) -> list[int]:
    """Every message of the stream, read through ``server`` to its end."""
    return [item["n"] for item in read_json(server.stream_url(name))]


def _retried(
    send: Callable[[], requests.Response], server: ServerProcess, within_s: float = 60
) -> tuple[requests.Response, int]:
    """``send()``'s answer and how many times it was sent: again after each 503 that names a
    Delta commit that failed or is in doubt (asking for a retry) until ``within_s`` passes; the
    server's log tail in the failure if it never answers otherwise."""
    deadline = time.monotonic() + within_s
    sent = 0
    while True:
        answer = send()
        sent += 1
        if answer.status_code != 503 or _code(answer) not in ("COMMIT_IN_DOUBT", "DELTA_UNAVAILABLE"):
            return answer, sent
        assert time.monotonic() < deadline, (answer.text, server.log_text()[-4000:])
        time.sleep(float(answer.headers["Retry-After"]))


def _code(answer: requests.Response) -> str:
    """The protocol error code of a refusal (its JSON body's ``error.code``)."""
    return str(answer.json()["error"]["code"])


class Appender(threading.Thread):
    """Appends ``{"n": i}`` to one stream through one server until stopped; notes what was acknowledged."""

    def __init__(self, server: ServerProcess, name: str) -> None:
        super().__init__(daemon=True)
        self.url = server.stream_url(name)
        self.acknowledged: list[int] = []
        self.refusals: dict[str, int] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        http = requests.Session()
        n = 0
        while not self.stopping.is_set():
            try:
                answer = http.post(self.url, data=b'{"n": %d}' % n, headers=JSON, timeout=30)
            except requests.ConnectionError:
                self.refusals["connection"] = self.refusals.get("connection", 0) + 1
                time.sleep(0.01)  # (a backoff before the next append)
                continue
            if answer.status_code in (200, 204):
                self.acknowledged.append(n)
            else:
                code = _code(answer)
                self.refusals[code] = self.refusals.get(code, 0) + 1
                time.sleep(0.01)  # (a backoff before the next append)
            n += 1


class Reader(threading.Thread):
    """Reads the whole stream through one server again and again; keeps every history it was given."""

    def __init__(self, server: ServerProcess, name: str) -> None:
        super().__init__(daemon=True)
        self.server, self.name = server, name
        self.seen: list[list[int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            # (refused, or gone: what it was given before is what counts)
            with contextlib.suppress(requests.ConnectionError, AssertionError, KeyError):
                self.seen.append(_history(self.server, self.name))
            time.sleep(0.05)  # (the reader's pace: a read every 50 ms)


@pytest.mark.parametrize("durability", ["wal", "delta"])
def test_a_second_server_refuses_to_start_and_names_the_owner(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path, durability: str
) -> None:
    storage = [*_storage(moto), "--durability", durability]
    owner = server_factory(*storage, "--node-id", "first", "--advertise-url", "http://first.example")
    assert requests.put(owner.stream_url("s"), headers=JSON, timeout=30).status_code == 201
    assert requests.post(owner.stream_url("s"), data=b'{"n": 0}', headers=JSON, timeout=30).status_code in (200, 204)
    with pytest.raises(RuntimeError) as refused:
        server_factory(*storage, "--node-id", "second", data_dir=tmp_path / "second")
    log = str(refused.value)
    assert "owned by node 'first' at http://first.example" in log and "--take-over" in log
    assert requests.post(owner.stream_url("s"), data=b'{"n": 1}', headers=JSON, timeout=30).status_code in (200, 204)
    assert _history(owner, "s") == [0, 1]


@pytest.mark.parametrize("durability", ["wal", "delta"])
def test_a_takeover_under_load_loses_nothing_acknowledged_and_forks_nothing(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path, durability: str
) -> None:
    storage = [*_storage(moto), "--durability", durability]
    old = server_factory(*storage, "--node-id", "old")
    assert requests.put(old.stream_url("load"), headers=JSON, timeout=30).status_code == 201
    appender, reader = Appender(old, "load"), Reader(old, "load")
    appender.start()
    reader.start()
    wait_for(lambda: len(appender.acknowledged) >= 30, timeout_s=30, interval_s=0.02)

    # (starting waits for the handover)
    new = server_factory(*storage, "--node-id", "new", "--take-over", data_dir=tmp_path / "new")
    wait_for(
        lambda: appender.refusals.get("NOT_OWNER", 0) > 0,
        timeout_s=30,
        interval_s=0.02,
        message=lambda: str(appender.refusals),
    )
    appender.stopping.set()
    reader.stopping.set()
    appender.join(60)
    reader.join(60)

    history = _history(new, "load")
    assert history == appender.acknowledged, (len(history), len(appender.acknowledged), appender.refusals)
    assert set(appender.refusals) <= {"OWNER_MOVING", "NOT_OWNER"}, appender.refusals
    assert reader.seen and all(seen == history[: len(seen)] for seen in reader.seen)
    refused = requests.post(old.stream_url("load"), data=b'{"n": -1}', headers=JSON, timeout=30)
    assert refused.status_code == 503 and _code(refused) == "NOT_OWNER"
    assert requests.post(new.stream_url("load"), data=b'{"n": -2}', headers=JSON, timeout=30).status_code in (200, 204)
    assert _history(new, "load") == [*history, -2]


def test_an_owner_that_does_not_answer_is_fenced_by_the_delta_commit(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, tmp_path: Path
) -> None:
    """``--durability delta``: a stopped (SIGSTOP) owner does not hand over; the new node takes the
    storage after the timeout, and the old one's writes, once it runs again, are refused."""
    storage = [*_storage(moto), "--durability", "delta"]
    old = server_factory(*storage, "--node-id", "old")
    # (Each commit waits for moto: on a loaded machine one may be slow or fail, answered with a
    # 503 and Retry-After that a client retries; the append is a producer's, so a retry is
    # stored once.)
    created, sent = _retried(lambda: requests.put(old.stream_url("s"), headers=JSON, timeout=30), old)
    # (a retry finds the stream its first request created)
    assert created.status_code == (201 if sent == 1 else 200), (created.text, old.log_text()[-4000:])
    first = {**JSON, "Producer-Id": "p", "Producer-Epoch": "0", "Producer-Seq": "0"}
    appended, _ = _retried(lambda: requests.post(old.stream_url("s"), data=b'{"n": 0}', headers=first, timeout=30), old)
    assert appended.status_code in (200, 204), (appended.text, old.log_text()[-4000:])
    assert old.proc is not None
    old.proc.send_signal(19)  # SIGSTOP: neither dead nor answering
    try:
        new = server_factory(
            *storage, "--node-id", "new", "--take-over", "--take-over-timeout-s", "2", data_dir=tmp_path / "new"
        )
    finally:
        old.proc.send_signal(18)  # SIGCONT
    answer = requests.post(old.stream_url("s"), data=b'{"n": 1}', headers=JSON, timeout=30)
    assert answer.status_code == 503 and _code(answer) == "NOT_OWNER", answer.text
    assert _history(new, "s") == [0]
    assert requests.post(new.stream_url("s"), data=b'{"n": 2}', headers=JSON, timeout=30).status_code in (200, 204)
    assert _history(new, "s") == [0, 2]
