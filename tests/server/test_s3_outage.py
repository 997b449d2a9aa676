"""S3 goes away under append load and comes back: no acknowledged append is lost.

How the outage is made: the server talks to moto's S3 server through a loopback TCP relay
(``S3Endpoint``), and the outage closes the relay's listening socket (new connections are
refused) and resets every open connection, until the server has reported the outage and
refused writers meanwhile, then listens again on the same port. That is exactly what an S3
endpoint that is down looks like from the server. Killing the moto process itself would
not be an outage but data loss: moto's server mode keeps buckets and objects in memory, so
a restarted moto would come back without the objects it had acknowledged, which no real S3
does. The relay can also stop forwarding without closing anything (``freeze``): an
endpoint that accepts connections and requests but does not answer, the other way an
object store goes away.

Both durability modes run the same scenario and must end with every acknowledged append
in the Delta table (read with ``deltalake`` directly), exactly once and in order, without
a server restart:

* ``wal``: appends keep being acknowledged while S3 is down, until the WAL outgrows a
  small ``--max-wal-bytes``; then 503 + ``Retry-After`` (``WAL_FULL``); after the outage
  the flush resumes by itself, the WAL shrinks and writes are accepted again;
* ``delta``: the appends waiting for the failing commit get 503 (``COMMIT_IN_DOUBT``:
  their records stay queued and commit after the outage), new ones 503
  (``DELTA_UNAVAILABLE``) until a commit succeeds again. Idempotent producers retry the
  same ``(id, epoch, seq)`` and end up with exactly one copy; plain appends refused
  up-front are never stored, in-doubt ones are stored once.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow.compute as pc
import pytest
import requests
from deltalake import DeltaTable
from outage_relay import S3Endpoint
from servers import MotoServer, ServerProcess, session, wait_for

MAX_WAL_BYTES = 256 * 1024
MESSAGE_BYTES = 2048


@dataclass
class Outage:
    """The test's view of time: which phase an answer arrived in."""

    phase: str = "before"  # before -> down -> after

    def __post_init__(self) -> None:
        self.lock = threading.Lock()


@dataclass
class Answer:
    key: str
    status: int
    phase: str
    code: str | None = None


@dataclass
class Writer:
    """Appends numbered messages one after another, recording every answer.

    With ``producer`` set it is an idempotent producer: a 503 is retried with the very
    same ``(id, epoch, seq)`` until it succeeds, as the protocol's retry model says."""

    url: str
    outage: Outage
    stop: threading.Event
    producer: str | None = None
    answers: list[Answer] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)

    def run(self) -> None:
        http = session()
        number = 0
        while not self.stop.is_set():
            key = f"{self.producer or 'plain'}-{number:06d}"
            headers = {"Content-Type": "text/plain"}
            if self.producer is not None:
                headers |= {"Producer-Id": self.producer, "Producer-Epoch": "0", "Producer-Seq": str(number)}
            try:
                response = http.post(self.url, data=_body(key), headers=headers, timeout=120)
            except requests.RequestException as error:
                self.unexpected.append(f"{key}: {error}")
                return
            answer = Answer(key, response.status_code, self.outage.phase)
            self.answers.append(answer)
            if response.status_code == 503:
                answer.code = _check_unavailable(response, self.unexpected)
                time.sleep(0.05)  # (a backoff before the next append)
                if self.producer is not None:
                    continue  # the same seq again
            elif response.status_code not in (200, 204):
                self.unexpected.append(f"{key}: {response.status_code} {response.text}")
                return
            number += 1

    def acknowledged(self) -> list[str]:
        return [a.key for a in self.answers if a.status in (200, 204)]

    def refused(self, code: str) -> list[Answer]:
        return [a for a in self.answers if a.code == code]


def _body(key: str) -> bytes:
    return key.encode().ljust(MESSAGE_BYTES, b".")


def _check_unavailable(response: requests.Response, problems: list[str]) -> str | None:
    retry_after = response.headers.get("Retry-After", "")
    if not retry_after.isdigit() or int(retry_after) < 1:
        problems.append(f"503 without a usable Retry-After: {retry_after!r}")
    try:
        error = response.json()["error"]
        code, message = error["code"], error["message"]
    except (ValueError, KeyError, TypeError):
        problems.append(f"503 without a JSON error body: {response.text!r}")
        return None
    if not message:
        problems.append(f"503 {code} without a message")
    return str(code)


@contextlib.contextmanager
def running(writers: list[Writer]) -> Iterator[None]:
    threads = [threading.Thread(target=writer.run, daemon=True) for writer in writers]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        for writer in writers:
            writer.stop.set()
        for thread in threads:
            thread.join(timeout=180)
    assert not [w.unexpected for w in writers if w.unexpected], [w.unexpected for w in writers]


@pytest.fixture
def s3(moto: MotoServer) -> Iterator[S3Endpoint]:
    with S3Endpoint(moto.port) as endpoint:
        yield endpoint


def _start_server(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, s3: S3Endpoint, *args: str
) -> tuple[ServerProcess, str]:
    bucket = f"outage-{uuid.uuid4().hex[:8]}"
    moto.create_bucket(bucket)
    uri = f"s3://{bucket}/durable-streams"
    storage_args = [arg.replace(moto.endpoint, s3.url) for arg in moto.server_args(uri)]
    server = server_factory(*storage_args, "--compaction-interval-s", "0", *args)
    return server, uri


def _delta_messages(moto: MotoServer, uri: str, stream: str) -> list[str]:
    """The stream's messages as the Delta table holds them, in sequence order."""
    table = DeltaTable(uri + "/streams", storage_options=moto.storage_options()).to_pyarrow_table()
    rows = table.filter(pc.and_(pc.equal(table["kind"], "message"), pc.equal(table["stream"], stream)))
    return [data.rstrip(b".").decode() for data in rows.sort_by("seq")["data"].to_pylist()]


def _read_stream(url: str) -> list[str]:
    http, body, offset = session(), b"", "-1"
    while True:
        response = http.get(url, params={"offset": offset}, timeout=30)
        assert response.status_code == 200, response.text
        body += response.content
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            return [key for key in body.decode().split(".") if key]


def _wal_bytes(server: ServerProcess) -> int:
    return sum(path.stat().st_size for path in (server.data_dir / "wal").glob("*.wal"))


def _degraded(server: ServerProcess) -> bool:
    """Whether the server reports its storage unable to make progress (a commit failed)."""
    metrics = session().get(f"{server.url}/metrics", timeout=30).text
    return "durable_streams_storage_degraded 1.0" in metrics


def _answered_again(writers: list[Writer], since: list[int], times: int) -> bool:
    """Whether every writer got ``times`` more answers since it had ``since``."""
    return all(len(w.answers) >= start + times for w, start in zip(writers, since, strict=True))


def _create(server: ServerProcess, name: str) -> str:
    url = server.stream_url(name)
    assert session().put(url, headers={"Content-Type": "text/plain"}, timeout=30).status_code == 201
    return url


@pytest.mark.slow
def test_wal_mode_keeps_acknowledging_until_the_cap_and_flushes_after_the_outage(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, s3: S3Endpoint
) -> None:
    server, uri = _start_server(
        server_factory, moto, s3, "--flush-interval-ms", "200", "--max-wal-bytes", str(MAX_WAL_BYTES)
    )
    url = _create(server, "wal-outage")
    outage = Outage()
    writer = Writer(url, outage, threading.Event())
    wal_at_refusal: list[int] = []

    with running([writer]):
        wait_for(lambda: len(writer.acknowledged()) >= 20, timeout_s=30)
        outage.phase = "down"
        s3.down()
        wait_for(lambda: writer.refused("WAL_FULL"), timeout_s=60)
        wal_at_refusal.append(_wal_bytes(server))
        # The outage lasts until the server has reported it and refused the writer again:
        # the acknowledged records wait in the WAL while Delta cannot be written.
        refusals = len(writer.refused("WAL_FULL"))
        wait_for(lambda: _degraded(server) and len(writer.refused("WAL_FULL")) >= refusals + 3, timeout_s=120)
        during = _read_stream(url)
        outage.phase = "after"
        s3.up()
        wait_for(lambda: any(a.phase == "after" and a.status == 204 for a in writer.answers), timeout_s=120)
        wait_for(lambda: _wal_bytes(server) < MAX_WAL_BYTES, timeout_s=120)

    acknowledged = writer.acknowledged()
    assert any(a.phase == "down" and a.status == 204 for a in writer.answers), "acks must go on while S3 is down"
    assert {a.code for a in writer.answers if a.status == 503} == {"WAL_FULL"}
    assert all(a.phase != "before" for a in writer.refused("WAL_FULL"))
    assert wal_at_refusal[0] > MAX_WAL_BYTES
    # Reads went on during the outage, showing acknowledged (WAL-durable) data.
    assert during == acknowledged[: len(during)] and len(during) >= 20
    wait_for(lambda: _delta_messages(moto, uri, "v1/stream/wal-outage") == acknowledged, timeout_s=120)
    assert _read_stream(url) == acknowledged
    assert server.starts == 1 and server.proc is not None and server.proc.poll() is None


@pytest.mark.slow
def test_wal_mode_stop_during_the_outage_keeps_the_wal(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, s3: S3Endpoint
) -> None:
    """A graceful stop whose final flush fails must leave the WAL for the next start.

    The appends all happen during the outage and then stop, so the failing flush holds
    every record when the server is told to stop: nothing is left waiting behind it."""
    server, uri = _start_server(server_factory, moto, s3, "--flush-interval-ms", "200")
    url = _create(server, "stop-in-outage")
    wait_for(lambda: _delta_messages(moto, uri, "v1/stream/stop-in-outage") == [] and _wal_bytes(server) == 0)
    s3.down()
    writer = Writer(url, Outage("down"), threading.Event())
    with running([writer]):
        wait_for(lambda: len(writer.acknowledged()) >= 50, timeout_s=30)
    acknowledged = writer.acknowledged()
    wait_for(lambda: _degraded(server), timeout_s=30)  # (a flush is failing: the stop's is its retry)

    server.stop()
    assert "final flush failed" in server.log_text()
    assert _wal_bytes(server) > 0
    s3.up()
    server.start()
    wait_for(lambda: _delta_messages(moto, uri, "v1/stream/stop-in-outage") == acknowledged, timeout_s=120)
    assert _read_stream(url) == acknowledged


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["refusing", "unanswering"])
def test_delta_mode_answers_503_during_the_outage_and_producers_get_exactly_once(
    server_factory: Callable[..., ServerProcess], moto: MotoServer, s3: S3Endpoint, kind: str
) -> None:
    """``unanswering``: the 503s come from the commit timeout, not from an error."""
    go_down, come_back = (s3.down, s3.up) if kind == "refusing" else (s3.freeze, s3.thaw)
    server, uri = _start_server(server_factory, moto, s3, "--durability", "delta")
    produced_url = _create(server, "produced")
    plain_url = _create(server, "plain")
    outage = Outage()
    producers = [Writer(produced_url, outage, threading.Event(), producer=f"p{i}") for i in range(3)]
    plain = Writer(plain_url, outage, threading.Event())
    writers = [*producers, plain]

    with running(writers):
        wait_for(lambda: all(len(w.acknowledged()) >= 5 for w in writers), timeout_s=60)
        outage.phase = "down"
        go_down()
        wait_for(lambda: all(w.answers and w.answers[-1].status == 503 for w in writers), timeout_s=120)
        # Nothing can commit now: readers see exactly what was acknowledged, and not the
        # in-doubt records that are applied in memory but not in Delta.
        visible = {url: _read_stream(url) for url in (produced_url, plain_url)}
        acknowledged_during = {w.producer: w.acknowledged() for w in writers}
        # The outage lasts until the server reports it and every writer has asked five more
        # times: none of those requests is acknowledged while nothing can commit.
        since = [len(w.answers) for w in writers]
        wait_for(lambda: _degraded(server) and _answered_again(writers, since, 5), timeout_s=120)
        assert {w.producer: w.acknowledged() for w in writers} == acknowledged_during
        outage.phase = "after"
        come_back()
        wait_for(
            lambda: all(len(w.acknowledged()) >= len(acknowledged_during[w.producer]) + 5 for w in writers),
            timeout_s=120,
        )

    assert sorted(visible[produced_url]) == sorted(k for p in producers for k in acknowledged_during[p.producer])
    assert visible[plain_url] == acknowledged_during[None]
    codes = {a.code for w in writers for a in w.answers if a.status == 503}
    assert codes == {"COMMIT_IN_DOUBT", "DELTA_UNAVAILABLE"}, codes

    # Producers: every seq exactly once and in order; a seq answered "in doubt" and
    # retried after the outage was a duplicate of the record that committed meanwhile.
    produced = _delta_messages(moto, uri, "v1/stream/produced")
    in_doubt_retried = 0
    for producer in producers:
        mine = [key for key in produced if key.startswith(f"{producer.producer}-")]
        assert mine == producer.acknowledged(), producer.producer
        for answer in producer.refused("COMMIT_IN_DOUBT"):
            final = next(a for a in producer.answers if a.key == answer.key and a.status in (200, 204))
            assert final.status == 204 and final.phase == "after"
            in_doubt_retried += 1
    assert in_doubt_retried > 0, "some producer request must have been in doubt"

    # Plain appends: acknowledged and in-doubt ones are stored once, in order; those
    # refused up-front never are.
    expected = [a.key for a in plain.answers if a.status == 204 or a.code == "COMMIT_IN_DOUBT"]
    assert _delta_messages(moto, uri, "v1/stream/plain") == expected
    assert not {a.key for a in plain.refused("DELTA_UNAVAILABLE")} & set(expected)
    assert _read_stream(plain_url) == expected
    assert server.starts == 1 and server.proc is not None and server.proc.poll() is None


def test_relay_outages_are_real(s3: S3Endpoint) -> None:
    """Nothing gets through while the endpoint is down or frozen, everything after."""
    http = session()
    assert http.get(s3.url + "/moto-api/", timeout=10).status_code == 200
    s3.down()
    with pytest.raises(requests.ConnectionError):
        http.get(s3.url + "/moto-api/", timeout=10)
    s3.up()
    assert http.get(s3.url + "/moto-api/", timeout=10).status_code == 200
    s3.freeze()
    with pytest.raises(requests.ReadTimeout):
        session().get(s3.url + "/moto-api/", timeout=1)
    s3.thaw()
    assert http.get(s3.url + "/moto-api/", timeout=10).status_code == 200
