"""Bearer-token auth: every scope against every surface (base streams, bucketed streams,
bucket operations, snapshots, bootstrap, listing), 401/403 with the protocol's JSON error
body, rejected requests changing nothing, forks checking their source, tokens kept out of
logs, CORS preflights and health probes left open, the configuration's startup errors, and
the refusal to serve a non-loopback address without tokens.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from security_support import bearer, new_token, write_tokens
from servers import REPO_ROOT, ServerProcess, free_port, session
from starlette.types import Message, Receive, Scope, Send

from durable_streams_server.cli import build_parser, config_from_args
from durable_streams_server.cluster.shard.guard import shard_guard
from durable_streams_server.config import ServerConfig
from durable_streams_server.http.auth import AuthMiddleware
from durable_streams_server.http.limits import PRINCIPAL_KEY
from durable_streams_server.protocol.tokens import parse_tokens
from durable_streams_server.serve import check_exposure

TEXT = {"Content-Type": "text/plain"}
TEAM_A = {"prefixes": ["v1/stream/team-a/"], "buckets": ["bucket-a", "spare-a"]}


@dataclass(frozen=True)
class Token:
    name: str
    scope: str
    limited: bool
    value: str


TOKENS = {
    token.name: token
    for token in [
        Token("reader", "read", False, new_token("reader")),
        Token("writer", "write", False, new_token("writer")),
        Token("admin", "admin", False, new_token("admin")),
        Token("team-a-reader", "read", True, new_token("team-a-reader")),
        Token("team-a-writer", "write", True, new_token("team-a-writer")),
        Token("team-a-admin", "admin", True, new_token("team-a-admin")),
        Token("hashed-writer", "write", False, new_token("hashed-writer")),
    ]
}
RANK = {"read": 0, "write": 1, "admin": 2}


def grants() -> list[dict[str, object]]:
    entries: list[dict[str, object]] = []
    for token in TOKENS.values():
        entry: dict[str, object] = {"name": token.name, "scope": token.scope, **(TEAM_A if token.limited else {})}
        if token.name.startswith("hashed"):
            entry["token_sha256"] = hashlib.sha256(token.value.encode()).hexdigest()
        else:
            entry["token"] = token.value
        entries.append(entry)
    return entries


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("auth")
    tokens = write_tokens(directory / "tokens.json", grants())
    args = ["--auth-tokens-file", str(tokens), "--long-poll-timeout-ms", "300", "--sse-reconnect-ms", "300"]
    server = ServerProcess(directory / "data", [*args, "--access-log", "--log-level", "debug"]).start()
    try:  # (killed if the set-up fails too)
        admin = as_token("admin")
        for bucket_id in ("bucket-a", "bucket-b"):
            assert admin.put(f"{server.url}/{bucket_id}").status_code == 201
        yield server
    finally:
        server.kill()


def as_token(name: str | None) -> requests.Session:
    http = session()
    http.headers.update(bearer(TOKENS[name].value if name else None))
    return http


# -- the matrix: every operation on every surface, for every token ----------------------------


@dataclass
class Target:
    """One freshly prepared resource: a stream with a snapshot, or a bucket.

    Reads start at the snapshot (``snap``): the messages before it are not retained.
    """

    server: ServerProcess
    url: str
    snap: str = ""
    tail: str = ""


def new_stream(server: ServerProcess, surface: str, area: str) -> Target:
    stream_id = f"s-{uuid.uuid4().hex[:10]}"
    path = f"v1/stream/team-{area}/{stream_id}" if surface == "base" else f"bucket-{area}/{stream_id}"
    url = f"{server.url}/{path}"
    admin = as_token("admin")
    assert admin.put(url, headers=TEXT).status_code == 201
    offsets = []
    for message in ("hello", "!"):
        appended = admin.post(url, headers=TEXT, data=message)
        assert appended.status_code == 204, appended.text
        offsets.append(appended.headers["Stream-Next-Offset"])
    assert admin.put(f"{url}/snapshot/{offsets[0]}", headers=TEXT, data="snap").status_code == 204
    return Target(server, url, *offsets)


def observe_stream(target: Target) -> object:
    """Everything a write could change: existence, tail, closed flag, content, snapshot."""
    admin = as_token("admin")
    head = admin.head(target.url)
    body = admin.get(target.url, params={"offset": target.snap})
    snapshot = admin.get(f"{target.url}/snapshot/{target.snap}")
    return (
        head.status_code,
        head.headers.get("Stream-Next-Offset"),
        head.headers.get("Stream-Closed"),
        body.content,
        snapshot.status_code,
        snapshot.content,
    )


def spare_bucket(server: ServerProcess, area: str, *, exists: bool) -> Target:
    url = f"{server.url}/spare-{area}"
    admin = as_token("admin")
    # Set the state up whatever an earlier case left (the answer to PUT/DELETE may be either),
    # then check the state itself.
    if exists:
        admin.put(url)
    else:
        admin.delete(url)
    assert admin.get(url).status_code == (200 if exists else 404)
    return Target(server, url)


def observe_bucket(target: Target) -> object:
    admin = as_token("admin")
    metadata = admin.get(target.url)
    listing = admin.get(f"{target.url}/streams")
    return metadata.status_code, metadata.content, listing.status_code, listing.content


@dataclass(frozen=True)
class Operation:
    name: str
    scope: str
    prepare: Callable[[ServerProcess, str], Target]
    send: Callable[[requests.Session, Target], requests.Response]
    ok: int
    observe: Callable[[Target], object] = observe_stream


def sse(http: requests.Session, target: Target) -> requests.Response:
    with http.get(target.url, params={"offset": target.snap, "live": "sse"}, stream=True, timeout=10) as response:
        if response.status_code != 200:
            assert response.content  # read the (short) error body before the connection closes
        return response


def stream_operations(surface: str) -> list[Operation]:
    def prepare(server: ServerProcess, area: str) -> Target:
        return new_stream(server, surface, area)

    def fresh(server: ServerProcess, area: str) -> Target:
        path = f"v1/stream/team-{area}" if surface == "base" else f"bucket-{area}"
        return Target(server, f"{server.url}/{path}/new-{uuid.uuid4().hex[:10]}")

    return [
        Operation(f"{surface}-head", "read", prepare, lambda h, t: h.head(t.url), 200),
        Operation(f"{surface}-read", "read", prepare, lambda h, t: h.get(t.url, params={"offset": t.snap}), 200),
        Operation(
            f"{surface}-long-poll",
            "read",
            prepare,
            lambda h, t: h.get(t.url, params={"offset": t.tail, "live": "long-poll"}),
            204,
        ),
        Operation(f"{surface}-sse", "read", prepare, sse, 200),
        Operation(f"{surface}-create", "write", fresh, lambda h, t: h.put(t.url, headers=TEXT), 201),
        Operation(f"{surface}-append", "write", prepare, lambda h, t: h.post(t.url, headers=TEXT, data="x"), 204),
        Operation(
            f"{surface}-close",
            "write",
            prepare,
            lambda h, t: h.post(t.url, headers={**TEXT, "Stream-Closed": "true"}),
            204,
        ),
        Operation(f"{surface}-delete", "write", prepare, lambda h, t: h.delete(t.url), 204),
        Operation(
            f"{surface}-snapshot-publish",
            "write",
            prepare,
            lambda h, t: h.put(f"{t.url}/snapshot/{t.tail}", headers=TEXT, data="newer"),
            204,
        ),
        Operation(
            f"{surface}-snapshot-latest",
            "read",
            prepare,
            lambda h, t: h.get(f"{t.url}/snapshot", allow_redirects=False),
            307,
        ),
        Operation(f"{surface}-snapshot-read", "read", prepare, lambda h, t: h.get(f"{t.url}/snapshot/{t.snap}"), 200),
        # The server keeps only the latest snapshot, which cannot be deleted: 409 is what
        # a token that may delete gets from the handler.
        Operation(
            f"{surface}-snapshot-delete", "write", prepare, lambda h, t: h.delete(f"{t.url}/snapshot/{t.snap}"), 409
        ),
        Operation(f"{surface}-bootstrap", "read", prepare, lambda h, t: h.get(f"{t.url}/bootstrap"), 200),
    ]


def bucket_operations() -> list[Operation]:
    def existing(server: ServerProcess, area: str) -> Target:
        return Target(server, f"{server.url}/bucket-{area}")

    def absent(server: ServerProcess, area: str) -> Target:
        return spare_bucket(server, area, exists=False)

    def present(server: ServerProcess, area: str) -> Target:
        return spare_bucket(server, area, exists=True)

    return [
        Operation("bucket-get", "read", existing, lambda h, t: h.get(t.url), 200, observe_bucket),
        Operation("bucket-head", "read", existing, lambda h, t: h.head(t.url), 200, observe_bucket),
        Operation("listing", "read", existing, lambda h, t: h.get(f"{t.url}/streams"), 200, observe_bucket),
        Operation("bucket-create", "admin", absent, lambda h, t: h.put(t.url), 201, observe_bucket),
        Operation("bucket-delete", "admin", present, lambda h, t: h.delete(t.url), 204, observe_bucket),
    ]


OPERATIONS = [*stream_operations("base"), *stream_operations("bucket"), *bucket_operations()]


def expected_status(token: str | None, operation: Operation, area: str) -> int:
    if token is None:
        return 401
    grant = TOKENS[token]
    if RANK[grant.scope] < RANK[operation.scope] or (grant.limited and area == "b"):
        return 403
    return operation.ok


@pytest.mark.parametrize("area", ["a", "b"])
@pytest.mark.parametrize("operation", OPERATIONS, ids=[operation.name for operation in OPERATIONS])
def test_every_token_on_every_operation(secured: ServerProcess, operation: Operation, area: str) -> None:
    """Area "a" is inside the team-a tokens' prefixes and buckets, area "b" outside them."""
    mismatches = []
    for token in [None, *TOKENS]:
        target = operation.prepare(secured, area)
        before = operation.observe(target)
        response = operation.send(as_token(token), target)
        expected = expected_status(token, operation, area)
        if response.status_code != expected:
            mismatches.append(f"{token}: {response.status_code} (expected {expected}) {response.text[:200]}")
        elif expected in (401, 403):
            if response.request.method != "HEAD":
                error = response.json()["error"]
                assert error["code"] == ("UNAUTHORIZED" if expected == 401 else "FORBIDDEN")
            assert response.headers["WWW-Authenticate"].startswith('Bearer realm="durable-streams"')
            assert operation.observe(target) == before, f"{token}: a rejected {operation.name} changed state"
    assert not mismatches, "\n".join(mismatches)


# -- 401 and 403 details -----------------------------------------------------------------------


def raw_request(server: ServerProcess, method: str, path: str, headers: list[tuple[str, str]]) -> tuple[int, Any]:
    """http.client, to send what requests cannot (a repeated Authorization header)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.putrequest(method, path)
        for name, value in headers:
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("authorization", "challenge"),
    [
        (None, 'Bearer realm="durable-streams"'),
        ("Basic dXNlcjpwYXNz", 'Bearer realm="durable-streams", error="invalid_request"'),
        ("Bearer", 'Bearer realm="durable-streams", error="invalid_request"'),
        ("Bearer ", 'Bearer realm="durable-streams", error="invalid_request"'),
        (f"{TOKENS['admin'].value}", 'Bearer realm="durable-streams", error="invalid_request"'),
        ("Bearer not-a-configured-token-at-all", 'Bearer realm="durable-streams", error="invalid_token"'),
        (f"Bearer {TOKENS['admin'].value}x", 'Bearer realm="durable-streams", error="invalid_token"'),
    ],
    ids=["missing", "basic", "bearer-alone", "bearer-empty", "no-scheme", "unknown", "near-miss"],
)
def test_401_for_missing_malformed_and_unknown_tokens(
    secured: ServerProcess, authorization: str | None, challenge: str
) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    response = session().get(f"{secured.url}/v1/stream/team-a/anything", params={"offset": "-1"}, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == challenge
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Access-Control-Allow-Origin"] == "*"  # a browser can read the error
    assert response.json()["error"]["code"] == "UNAUTHORIZED"
    assert TOKENS["admin"].value not in response.text


def test_the_scheme_is_case_insensitive(secured: ServerProcess) -> None:
    target = new_stream(secured, "base", "a")
    response = session().get(
        target.url, params={"offset": target.snap}, headers={"Authorization": f"bearer {TOKENS['reader'].value}"}
    )
    assert response.status_code == 200
    assert response.content == b"!"


def test_two_authorization_headers_are_rejected(secured: ServerProcess) -> None:
    target = new_stream(secured, "base", "a")
    path = target.url.removeprefix(secured.url)
    headers = [
        ("Authorization", f"Bearer {TOKENS['admin'].value}"),
        ("Authorization", f"Bearer {TOKENS['reader'].value}"),
    ]
    status, body = raw_request(secured, "DELETE", path, headers)
    assert status == 401, body
    assert as_token("admin").head(target.url).status_code == 200


def test_403_names_the_token_and_what_it_lacks(secured: ServerProcess) -> None:
    target = new_stream(secured, "base", "b")
    scope = as_token("reader").post(target.url, headers=TEXT, data="x")
    assert scope.status_code == 403
    assert (
        scope.headers["WWW-Authenticate"] == 'Bearer realm="durable-streams", error="insufficient_scope", scope="write"'
    )
    message = scope.json()["error"]["message"]
    assert "'reader'" in message and "'read'" in message and "'write'" in message
    outside = as_token("team-a-writer").post(target.url, headers=TEXT, data="x")
    assert outside.status_code == 403
    assert outside.json()["error"]["message"] == (
        f"token 'team-a-writer' does not cover stream '{target.url.removeprefix(secured.url + '/')}'"
    )
    for response in (scope, outside):
        assert not any(token.value in response.text for token in TOKENS.values())


def test_a_403_is_not_mistaken_for_producer_fencing(secured: ServerProcess) -> None:
    """The client tells the two 403s apart by Producer-Epoch, which an auth 403 never has."""
    target = new_stream(secured, "base", "a")
    headers = {**TEXT, "Producer-Id": "p", "Producer-Epoch": "0", "Producer-Seq": "0"}
    response = as_token("reader").post(target.url, headers=headers, data="x")
    assert response.status_code == 403
    assert "Producer-Epoch" not in response.headers


# -- forks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("surface", ["base", "bucket"])
def test_a_fork_needs_read_on_its_source(secured: ServerProcess, surface: str) -> None:
    inside, outside = new_stream(secured, surface, "a"), new_stream(secured, surface, "b")
    team_a = as_token("team-a-writer")
    prefix = f"{secured.url}/v1/stream/team-a" if surface == "base" else f"{secured.url}/bucket-a"

    def fork(source: Target, http: requests.Session) -> tuple[str, requests.Response]:
        url = f"{prefix}/fork-{uuid.uuid4().hex[:10]}"
        reference = source.url.removeprefix(secured.url)
        return url, http.put(url, headers={**TEXT, "Stream-Forked-From": reference})

    url, refused = fork(outside, team_a)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["message"].startswith("token 'team-a-writer' does not cover stream")
    assert as_token("admin").head(url).status_code == 404
    url, forked = fork(inside, team_a)
    assert forked.status_code == 201, forked.text
    assert as_token("admin").head(url).headers["Stream-Next-Offset"] == inside.tail
    _, unlimited = fork(outside, as_token("writer"))
    assert unlimited.status_code == 201, unlimited.text


def test_a_fork_source_given_as_a_full_url_is_checked(secured: ServerProcess) -> None:
    outside = new_stream(secured, "base", "b")
    url = f"{secured.url}/v1/stream/team-a/fork-{uuid.uuid4().hex[:10]}"
    response = as_token("team-a-writer").put(url, headers={**TEXT, "Stream-Forked-From": outside.url})
    assert response.status_code == 403
    assert as_token("admin").head(url).status_code == 404


def test_no_token_opens_the_cluster_internal_route(secured: ServerProcess) -> None:
    """Only a cluster's own credential opens ``/v1/cluster/fork-links/...`` (a fork's export, its
    unlink): a token, even an admin's, does not; a server that is no cluster shard has none."""
    source = new_stream(secured, "base", "b")
    internal = f"{secured.url}/v1/cluster/fork-links/{source.url.split('/', 3)[3]}"
    link = {"Durable-Streams-Fork-Link": "l1", "Durable-Streams-Fork": "v1/stream/team-a/copy"}
    for name in ("reader", "admin"):
        response = as_token(name).post(internal, headers=link)
        assert (response.status_code, response.json()["error"]["code"]) == (404, "NOT_FOUND"), response.text
    assert session().delete(internal, params={"link": "l1"}).status_code == 404


# -- paths that are open, or server-wide --------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/stream/team-b/x", "/bucket-b", "/bucket-b/streams", "/bucket-b/x/snapshot/1"])
def test_cors_preflight_needs_no_token(secured: ServerProcess, path: str) -> None:
    response = session().options(
        f"{secured.url}{path}",
        headers={"Origin": "https://app.example", "Access-Control-Request-Headers": "Authorization"},
    )
    assert response.status_code == 204
    assert "Authorization" in response.headers["Access-Control-Allow-Headers"]


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_health_probes_need_no_token_but_a_bucket_of_that_name_does(secured: ServerProcess, path: str) -> None:
    assert session().get(f"{secured.url}{path}").status_code not in (401, 403)
    # PUT/DELETE there would change a bucket of that name: those still need an admin token.
    assert session().put(f"{secured.url}{path}").status_code == 401
    assert as_token("writer").put(f"{secured.url}{path}").status_code == 403


def test_metrics_need_an_unlimited_admin_token(secured: ServerProcess) -> None:
    url = f"{secured.url}/metrics"
    assert session().get(url).status_code == 401
    assert as_token("writer").get(url).status_code == 403
    limited = as_token("team-a-admin").get(url)
    assert limited.status_code == 403
    assert limited.json()["error"]["message"] == "token 'team-a-admin' does not cover the whole server"
    assert as_token("admin").get(url).status_code not in (401, 403)


def test_unknown_paths_need_a_token_then_get_404(secured: ServerProcess) -> None:
    url = f"{secured.url}/bucket-a/s/snapshot/1/extra"
    assert session().get(url).status_code == 401
    assert as_token("team-a-reader").get(url).status_code == 404


# -- secrets stay secret ----------------------------------------------------------------------


def test_tokens_never_reach_the_log(secured: ServerProcess) -> None:
    """Debug logging and the access log on; valid, wrong and malformed tokens all sent."""
    target = new_stream(secured, "bucket", "a")
    for token in TOKENS.values():
        assert session().get(target.url, params={"offset": target.snap}, headers=bearer(token.value)).status_code == 200
        session().get(target.url, headers=bearer(token.value + "-wrong"))
        session().get(target.url, headers={"Authorization": token.value})
    log = secured.log_text()
    assert "GET /bucket-a/" in log  # the access log did record the requests
    for token in TOKENS.values():
        assert token.value not in log


def test_grant_reprs_hide_tokens_and_digests() -> None:
    config = parse_tokens('[{"name": "etl", "token": "0123456789abcdef-secret", "scope": "write"}]', "test")
    text = repr(config) + repr(ServerConfig(auth=config))
    assert "etl" in text
    assert "secret" not in text
    shard = ServerConfig(cluster_shard="0/2", cluster_router="http://127.0.0.1:1", cluster_secret="cluster-key-42")
    guard = shard_guard(shard)
    assert guard is not None and guard.secret == "cluster-key-42"
    assert "cluster-key-42" not in repr(shard) + repr(guard)  # the cluster's credential neither
    assert hashlib.sha256(b"0123456789abcdef-secret").digest().hex() not in text
    assert str(hashlib.sha256(b"0123456789abcdef-secret").digest()) not in text


# -- the middleware in-process: the principal, and apps mounted under a prefix -----------------


def call_middleware(path: str, root_path: str = "") -> tuple[list[Scope], list[Message]]:
    """One request through ``AuthMiddleware`` alone: (scopes passed on, messages answered)."""
    config = parse_tokens(
        '[{"name": "etl", "token": "0123456789abcdef-etl", "scope": "read", "prefixes": ["v1/stream/team-a/"]}]', "t"
    )
    passed: list[Scope] = []
    answered: list[Message] = []

    async def downstream(scope: Scope, receive: Receive, send: Send) -> None:
        passed.append(scope)

    async def send(message: Message) -> None:
        answered.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "root_path": root_path,
        "headers": [(b"authorization", b"Bearer 0123456789abcdef-etl")],
    }
    asyncio.run(AuthMiddleware(downstream, config)(scope, receive, send))
    return passed, answered


def test_the_principal_is_the_token_name() -> None:
    """Per-token rate limiting keys on ``scope["durable_streams.principal"]``."""
    passed, answered = call_middleware("/v1/stream/team-a/x")
    assert [scope[PRINCIPAL_KEY] for scope in passed] == ["etl"] and not answered


def test_a_mounted_app_is_checked_on_the_path_its_router_sees() -> None:
    passed, _ = call_middleware("/ds/v1/stream/team-a/x", root_path="/ds")
    assert len(passed) == 1
    passed, answered = call_middleware("/ds/v1/stream/team-b/x", root_path="/ds")
    assert not passed and answered[0]["status"] == 403


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/v1/stream/team-a/x/snapshot/5", True),
        ("/v1/stream/team-b/x/snapshot/5", False),
        ("/bucket-b", False),
        ("/bucket-b/", False),  # the router redirects to /bucket-b: judged as that
        ("/bucket-b/x/", False),
        ("/bucket-b/x/snapshot/1/extra", True),  # no route: a valid token, then the router's 404
    ],
)
def test_the_policy_judges_paths_as_the_route_table_does(path: str, allowed: bool) -> None:
    passed, answered = call_middleware(path)
    status = answered[0]["status"] if answered else None
    assert (len(passed), status) == ((1, None) if allowed else (0, 403))


# -- configuration ----------------------------------------------------------------------------


def test_tokens_from_the_environment(tmp_path: Path) -> None:
    token = new_token("env")
    text = f'[{{"name": "env", "token": "{token}", "scope": "read"}}]'
    server = ServerProcess(tmp_path / "data", env={"DURABLE_STREAMS_AUTH_TOKENS": text}).start()
    try:
        url = f"{server.url}/v1/stream/x"
        assert session().head(url).status_code == 401
        assert session().head(url, headers=bearer(token)).status_code == 404  # authenticated, no such stream
        assert session().put(url, headers=bearer(token)).status_code == 403
        assert token not in server.log_text()
    finally:
        server.kill()


SHORT = "short-token"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "expected a non-empty JSON list"),
        ('{"name": "x"}', "expected a non-empty JSON list"),
        ('["x"]', "token #1: expected a JSON object"),
        ('[{"token": "0123456789abcdefgh", "scope": "read"}]', "token #1: field 'name' must be a non-empty string"),
        ('[{"name": "etl", "token": "0123456789abcdefgh", "scope": "root"}]', "('etl'): field 'scope' must be one of"),
        ('[{"name": "etl", "scope": "read"}]', "give exactly one of the fields 'token' and 'token_sha256'"),
        (
            '[{"name": "etl", "token": "0123456789abcdefgh", "token_sha256": "' + "a" * 64 + '", "scope": "read"}]',
            "give exactly one of the fields",
        ),
        (f'[{{"name": "etl", "token": "{SHORT}", "scope": "read"}}]', "field 'token' is shorter than 16 characters"),
        ('[{"name": "etl", "token": "0123456789 abcdefgh", "scope": "read"}]', "field 'token' must be a string of"),
        ('[{"name": "etl", "token_sha256": "abc", "scope": "read"}]', "field 'token_sha256' must be 64 hex digits"),
        (
            '[{"name": "etl", "token": "0123456789abcdefgh", "scope": "read", "bucket": ["b1"]}]',
            "unknown field(s) bucket",
        ),
        (
            '[{"name": "etl", "token": "0123456789abcdefgh", "scope": "read", "buckets": "b1"}]',
            "field 'buckets' must be",
        ),
        ('[{"name": "etl", "token": "0123456789abcdefgh", "scope": "read", "buckets": ["B!"]}]', "invalid bucket id"),
        ('[{"name": "etl", "token": "0123456789abcdefgh", "scope": "read", "prefixes": [""]}]', "empty prefixes"),
        (
            '[{"name": "a", "token": "0123456789abcdefgh", "scope": "read"},'
            ' {"name": "a", "token": "0123456789abcdefgi", "scope": "read"}]',
            "two tokens are named 'a'",
        ),
        (
            '[{"name": "a", "token": "0123456789abcdefgh", "scope": "read"},'
            ' {"name": "b", "token": "0123456789abcdefgh", "scope": "admin"}]',
            "tokens 'a' and 'b' are the same token",
        ),
    ],
)
def test_malformed_token_files_stop_the_start(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(content)
    with pytest.raises(SystemExit) as raised:
        config_from_args(build_parser().parse_args(["--auth-tokens-file", str(path)]))
    text = str(raised.value.code)
    assert text.startswith(f"--auth-tokens-file {path}"), text
    assert message in text, text
    assert SHORT not in text and "0123456789" not in text  # never echo a token


def test_the_server_exits_on_a_bad_token_file_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text('[{"name": "etl", "token": "0123456789abcdefgh", "scope": "superuser"}]')
    result = run_server(tmp_path, "--auth-tokens-file", str(path))
    assert result.returncode != 0
    assert (
        f"--auth-tokens-file {path}: token #1 ('etl'): field 'scope' must be one of read, write, admin" in result.stderr
    )
    assert "0123456789abcdefgh" not in result.stderr + result.stdout


def test_a_missing_token_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"cannot read --auth-tokens-file .*nope\.json"):
        config_from_args(build_parser().parse_args(["--auth-tokens-file", str(tmp_path / "nope.json")]))


def test_tokens_configured_twice_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_tokens(tmp_path / "tokens.json", [{"name": "a", "token": new_token("a"), "scope": "read"}])
    monkeypatch.setenv("DURABLE_STREAMS_AUTH_TOKENS", path.read_text())
    with pytest.raises(SystemExit, match="configured twice"):
        config_from_args(build_parser().parse_args(["--auth-tokens-file", str(path)]))


# -- binding beyond loopback ------------------------------------------------------------------


def run_server(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "durable_streams_server", "--data-dir", str(tmp_path / "data"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_needs_no_tokens(host: str) -> None:
    check_exposure(host, ServerConfig(), allow_unauthenticated=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "10.0.0.1", "example.com", "my-host"])
def test_other_addresses_need_tokens_or_the_explicit_opt_in(host: str) -> None:
    with pytest.raises(SystemExit, match=f"refusing to serve --host {host} without authentication"):
        check_exposure(host, ServerConfig(), allow_unauthenticated=False)
    check_exposure(host, ServerConfig(), allow_unauthenticated=True)
    tokens = parse_tokens('[{"name": "a", "token": "0123456789abcdefgh", "scope": "read"}]', "t")
    check_exposure(host, ServerConfig(auth=tokens), allow_unauthenticated=False)


def test_the_server_refuses_a_public_bind_without_tokens(tmp_path: Path) -> None:
    result = run_server(tmp_path, "--host", "0.0.0.0", "--port", str(free_port()))
    assert result.returncode != 0
    assert "refusing to serve --host 0.0.0.0 without authentication" in result.stderr
    assert "--allow-unauthenticated" in result.stderr


def test_allow_unauthenticated_serves_a_public_bind(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", ["--host", "0.0.0.0", "--allow-unauthenticated"]).start()
    try:
        assert session().put(server.stream_url("open"), headers=TEXT).status_code == 201
    finally:
        server.kill()
