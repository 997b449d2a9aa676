"""The client and the CLI against a server with bearer tokens: the token rides on every
request (catch-up, long-poll, SSE, producers, buckets, snapshots and their redirect,
bootstrap), and 401/403 surface as ``Unauthorized`` / ``Forbidden`` with clear messages.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from client_support import cli, later, unique
from security_support import new_token, write_tokens
from servers import ServerProcess

from pyspark_durable_streams.client import (
    Backoff,
    Client,
    Forbidden,
    Producer,
    ProducerClosed,
    ProducerFenced,
    Unauthorized,
)

WRITER = new_token("writer")
READER = new_token("reader")
ADMIN = new_token("admin")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("client-auth")
    tokens = write_tokens(
        directory / "tokens.json",
        [
            {"name": "writer", "token": WRITER, "scope": "write"},
            {"name": "reader", "token": READER, "scope": "read"},
            {"name": "admin", "token": ADMIN, "scope": "admin"},
        ],
    )
    args = ["--auth-tokens-file", str(tokens), "--long-poll-timeout-ms", "500", "--sse-reconnect-ms", "700"]
    server = ServerProcess(directory / "data", args).start()
    yield server
    server.kill()


def client(server: ServerProcess, token: str | None) -> Client:
    return Client(server.url, token=token, backoff=Backoff(deadline_s=5))


def test_the_token_rides_on_every_kind_of_request(secured: ServerProcess) -> None:
    with client(secured, WRITER) as writer, client(secured, READER) as reader, client(secured, ADMIN) as admin:
        path = f"v1/stream/{unique('auth')}"
        stream = writer.stream(path)
        stream.create("application/json")
        stream.append_json({"n": 1})
        first = stream.append_json({"n": 2}).next_offset
        with Producer(stream, "p") as producer:
            producer.send_json({"n": 3})
        stream.snapshots.publish(first, b'{"upto": 2}', content_type="application/json")
        mine = reader.stream(path)
        assert [m.json() for m in mine.read(first)] == [{"n": 3}]
        assert mine.snapshots.latest() is not None  # through the server's 307 redirect
        with mine.bootstrap() as boot:
            assert boot.snapshot is not None and [m.json() for m in boot.messages] == [{"n": 3}]
        for live in ("long-poll", "sse"):
            tail = mine.metadata().next_offset
            later(0.3, lambda: stream.append_json({"live": True}))
            with mine.read(tail, live=live) as follower:
                assert next(iter(follower)).json() == {"live": True}
        bucket = admin.bucket(unique("bkt"))
        bucket.create()
        writer.bucket(bucket.bucket_id).stream("s").create("text/plain")
        assert [info.stream_id for info in reader.bucket(bucket.bucket_id).streams()] == ["s"]


def test_no_token_and_a_wrong_token_are_unauthorized(secured: ServerProcess) -> None:
    with client(secured, WRITER) as writer:
        stream = writer.stream(f"v1/stream/{unique('auth')}")
        stream.create("text/plain")
    for token in (None, READER + "x"):
        with client(secured, token) as other:
            with pytest.raises(Unauthorized) as raised:
                list(other.stream(stream.path).read())
            assert raised.value.status == 401 and raised.value.code == "UNAUTHORIZED"
            assert "bearer token" in raised.value.message
            assert READER not in str(raised.value)


def test_outside_its_scope_is_forbidden_not_fenced(secured: ServerProcess) -> None:
    with client(secured, WRITER) as writer, client(secured, READER) as reader:
        stream = writer.stream(f"v1/stream/{unique('auth')}")
        stream.create("text/plain")
        mine = reader.stream(stream.path)
        with pytest.raises(Forbidden) as raised:
            mine.append(b"x")
        assert not isinstance(raised.value, ProducerFenced)
        assert raised.value.message.startswith("token 'reader' has scope 'read'")
        producer = Producer(mine, "p")
        producer.send(b"x")
        with pytest.raises((Forbidden, ProducerClosed)) as failed:
            producer.close()
        error = failed.value if isinstance(failed.value, Forbidden) else failed.value.__cause__
        assert isinstance(error, Forbidden) and not isinstance(error, ProducerFenced)
        with pytest.raises(Forbidden):
            reader.bucket(unique("bkt")).create()
        assert list(stream.read()) == []  # nothing was appended


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_passes_the_token_from_the_option_or_the_environment(
    secured: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = f"v1/stream/{unique('cli')}"
    created = cli("create", path, "--content-type", "text/plain", "--data", "one\n", "--token", WRITER, url=secured.url)
    assert created.returncode == 0, created.stderr
    monkeypatch.setenv("DURABLE_STREAMS_TOKEN", READER)
    cat = cli("cat", path, url=secured.url)
    assert cat.returncode == 0, cat.stderr
    assert cat.stdout == b"one\n"
    refused = cli("append", path, url=secured.url, stdin=b"two\n")
    assert refused.returncode == 1
    assert b"403 [FORBIDDEN]" in refused.stderr and b"token 'reader' has scope 'read'" in refused.stderr


def test_cli_explains_a_missing_or_wrong_token(secured: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABLE_STREAMS_TOKEN", raising=False)
    path = f"v1/stream/{unique('cli')}"
    missing = cli("cat", path, url=secured.url)
    assert missing.returncode == 1
    assert b"401" in missing.stderr and b"pass --token or set DURABLE_STREAMS_TOKEN" in missing.stderr
    wrong = cli("cat", path, "--token", "not-the-right-token-at-all", url=secured.url)
    assert wrong.returncode == 1
    assert b"the bearer token is not valid" in wrong.stderr and b"check --token" in wrong.stderr
    assert b"not-the-right-token-at-all" not in wrong.stderr


def test_cli_help_names_the_token_variable_but_never_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_STREAMS_TOKEN", READER)
    result = cli("--help")
    assert b"DURABLE_STREAMS_TOKEN" in result.stdout and b"--ca-cert" in result.stdout
    assert READER.encode() not in result.stdout
