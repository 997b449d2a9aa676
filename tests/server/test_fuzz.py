"""Property-based fuzzing (hypothesis): hostile methods, paths, query parameters, headers
and bodies against a real server over loopback sockets, and the header parsers directly.

Properties, for every generated request:

* the answer is never a 5xx;
* a refusal (4xx) carries the JSON error body -- except uvicorn's own plain-text 400 for
  bytes that are not HTTP at all, which never reach the app;
* a refusal changes nothing: the targeted stream's HEAD metadata and full content are
  identical, a fresh name it targeted still does not exist, and the server's newest
  LSN (``durable_streams_last_lsn`` in /metrics: every stored change takes one) has not
  moved, so nothing was stored anywhere.

Requests go out as raw bytes (``rawhttp``): HTTP client libraries re-quote paths and refuse
odd header values, which would hide exactly the inputs worth trying. Runs are
reproducible: ``derandomize=True`` and no example database.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import quote

import pytest
import requests
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from multipart_parsing import get_bootstrap
from rawhttp import RawResponse, exchange, request_bytes
from security_support import new_token, write_tokens
from servers import ServerProcess, session

from durable_streams_server.http.targets import stream_name_from_reference
from durable_streams_server.protocol import headers as h
from durable_streams_server.protocol.cursor import response_cursor
from durable_streams_server.protocol.errors import BadRequest
from durable_streams_server.protocol.ids import (
    validate_base_path,
    validate_bucket_id,
    validate_raw_path,
    validate_stream_id,
)
from durable_streams_server.protocol.json_mode import split_messages
from durable_streams_server.protocol.offsets import parse_offset

BUCKET = "fuzzb"
MAX_BODY = 4096
CONTENT_TYPES = {"json": "application/json", "bin": "application/octet-stream"}
SEED = {"json": [b'{"n":1}', b'[{"n":2},"three"]'], "bin": [b"\x00\x01binary", b"\xff\xfe"]}
KINDS = [(surface, content) for surface in ("base", "bucket") for content in ("json", "bin")]
FINGERPRINT_HEADERS = (
    "Content-Type",
    "Stream-Next-Offset",
    "Stream-Closed",
    "Stream-TTL",
    "Stream-Expires-At",
    "Stream-Snapshot-Offset",
)
UVICORN_PARSE_ERROR = b"Invalid HTTP request received."
ADMIN = {"name": "fuzz-admin", "scope": "admin"}
LSN_LINE = re.compile(r"^durable_streams_last_lsn (\S+)$", re.MULTILINE)

# -- the hostile vocabulary ---------------------------------------------------------------

OFFSETS = [
    "-1",
    "now",
    "",
    "0000000000000000_0000000000000000",
    "0000000000000001_0000000000000000",
    "0000000000000002_0000000000000003",
    "0000000000000099_0000000000000000",
    "9999999999999999_9999999999999999",
    "0000000000000000_00000000000000x0",
    "²²²²²²²²²²²²²²²²_0000000000000000",
    "-0000000000000001_000000000000000",
]
NUMBERS = ["²", "9" * 5000, "0", "1", "-1", "1.5", "+1", "01", "1e3", "٣", "9" * 17, "9007199254740992", " 7 "]
HOSTILE_TEXT = [
    "",
    " ",
    "true",
    "null",
    "%00",
    "%ff",
    "../../etc/passwd",
    "a" * 3000,
    "\x01\x7f",
    "é",
    "\u202e",
    "http://[",
    "http://x/v1/stream/fz/json-0",
    "/v1/stream/fz/bin-1",
    f"/{BUCKET}/json-2",
]
SEEDED = "<seeded>"
"""Stands for the targeted seeded stream's path in generated values (resolved when sent)."""
QUERY_VALUES: dict[str, list[str]] = {
    "offset": OFFSETS,
    "live": ["long-poll", "sse", "websocket", "LONG-POLL", ""],
    "cursor": NUMBERS,
    "limit": NUMBERS,
    "prefix": HOSTILE_TEXT,
    "after": HOSTILE_TEXT,
    "x": HOSTILE_TEXT,
}
HEADER_VALUES: dict[str, list[str]] = {
    "Content-Type": [
        "application/json",
        "application/octet-stream",
        "text/plain",
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "nope",
        "a/b/c",
        "multipart/mixed; boundary=x",
    ],
    # No valid short TTL or past expiry: a stream that expires would be deleted lazily by a
    # later (possibly refused) request, which is a change that request did not make.
    "Stream-TTL": ["", "+3600", "03600", "3.6e3", "-1", "abc", "²", "9" * 17, "9" * 5000, "86400"],
    "Stream-Expires-At": [
        "tomorrow",
        "2099-01-01",
        "2099-13-01T00:00:00Z",
        "2099-01-01T00:00:00+99:99",
        "9999-12-31T23:59:59Z",
        "2099-01-01T00:00:00Z",
        "2099-02-30T00:00:00Z",
    ],
    "Stream-Closed": ["true", "false", "TRUE", "yes", ""],
    "Stream-Seq": ["a", "b", "0", "zzz", ""],
    "Producer-Id": ["p1", "", " ", "\xff"],
    "Producer-Epoch": NUMBERS,
    "Producer-Seq": NUMBERS,
    "Stream-Forked-From": [SEEDED, f"http://127.0.0.1{SEEDED}", *HOSTILE_TEXT],
    "Stream-Fork-Offset": OFFSETS,
    "Stream-Fork-Sub-Offset": NUMBERS,
    "If-None-Match": ['"x"', "*", ""],
    "Accept": ["multipart/mixed", "application/vnd.apache.arrow.stream", "*/*", "text/event-stream", ";;;="],
    "Authorization": ["Bearer x", "Basic Zm9vOmJhcg==", "Bearer", ""],
    "X-Forwarded-For": ["1.2.3.4", "garbage", ""],
    "Connection": ["keep-alive", "upgrade"],
    "Upgrade": ["websocket", "h2c"],
}
PATH_SUFFIXES = [
    "/snapshot",
    "/bootstrap",
    "/snapshot/0000000000000001_0000000000000000",
    "/snapshot/garbage",
    "/bootstrap/extra",
    "/snapshot/" + "9" * 40,
    "/..",
    "/.",
    "/%2e%2e",
    "/",
    "//x",
    "%00",
    "%2F",
    "%2Fsnapshot",
    "%ff",
    "%",
    "%zz",
    "/streams",
    "/" + "a" * 1100,
    "é".encode().decode("latin-1"),  # raw non-ASCII bytes: not even HTTP
]
WHOLE_PATHS = [
    "/",
    "//",
    "*",
    "/metrics",
    "/metrics/x",
    "/healthz",
    "/readyz/x/y",
    f"/{BUCKET}",
    f"/{BUCKET}/streams/x",
    "/FUZZB/x",
    "/abc/x",
    "/" + "b" * 65 + "/x",
    "/v1/stream",
    "/v1/stream/",
    "/v1/stream//",
    "/v1/x/y",
    "/a/b/c/d/e",
    "/%ff%fe/x",
    "http://127.0.0.1/v1/stream/fz/json-0",
]
RAW_QUERIES = ["%", "%zz", "a=b=c", "&&", ";", "offset", "=x", "offset=-1&offset=-1"]
METHODS = ["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH", "FOO"]
OPERATIONS = ["read", "read", "append", "append", "create", "fork", "fork", "snapshot", "head", "delete", "other"]

printable = st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f")
any_text = st.text(printable, max_size=40)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=8,
)
hostile_body = st.one_of(
    st.none(),
    st.just(b""),
    json_value.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=200),
    st.sampled_from([b"{", b"[1,", b"NaN", b"\xff\xfe", b"[]", b"{}", b"null", b'"\\ud800"', b"[" * 4000]),
    st.just(b"x" * (MAX_BODY + 1)),
)


def hostile_value(known: list[str]) -> st.SearchStrategy[str]:
    """Mostly the field's own suspects, else anything."""
    own = st.sampled_from(known)
    return st.one_of(own, own, st.sampled_from(HOSTILE_TEXT), any_text)


def header_value(name: str) -> st.SearchStrategy[bytes]:
    if name == "Stream-TTL":  # see above: no free text that could be a short TTL
        return st.sampled_from(HEADER_VALUES[name]).map(str.encode)
    return st.one_of(hostile_value(HEADER_VALUES[name]).map(str.encode), st.binary(max_size=24))


@dataclass
class Hostile:
    """One request: a valid operation on a seeded stream (or a fresh name), then up to
    three mutations. Mostly-valid requests reach deep into the handlers, where a single
    hostile field is most likely to find a path nobody guarded."""

    surface: str
    content: str
    operation: str
    fresh: bool = False
    method: str = "GET"
    path_suffix: str = ""
    whole_path: str | None = None
    query: list[tuple[str, str]] = field(default_factory=list)
    raw_query: str | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes | None = None
    chunked: bool = False


def valid_body(draw: st.DrawFn, content: str) -> bytes:
    if content == "json":
        return json.dumps(draw(json_value)).encode()
    return draw(st.binary(min_size=1, max_size=100))


@st.composite
def hostile(draw: st.DrawFn) -> Hostile:
    case = Hostile(
        draw(st.sampled_from(["base", "bucket"])),
        content := draw(st.sampled_from(["json", "bin"])),
        operation := draw(st.sampled_from(OPERATIONS)),
    )
    content_type = (b"Content-Type", CONTENT_TYPES[content].encode())
    if operation == "read":
        case.query = [("offset", draw(st.sampled_from(["-1", "now", "0000000000000001_0000000000000000"])))]
        case.query += draw(st.sampled_from([[], [("live", "long-poll")], [("live", "sse")]]))
        case.query.append(("cursor", draw(st.sampled_from(["1", "99999999"]))))
    elif operation == "append":
        case.method, case.headers, case.body = "POST", [content_type], valid_body(draw, content)
        if draw(st.booleans()):
            seq = str(draw(st.integers(0, 3))).encode()
            case.headers += [(b"Producer-Id", b"fz"), (b"Producer-Epoch", b"0"), (b"Producer-Seq", seq)]
    elif operation in ("create", "fork"):
        case.method, case.fresh, case.headers = "PUT", True, [content_type]
        if operation == "fork":
            case.headers.append((b"Stream-Forked-From", SEEDED.encode()))
        elif draw(st.booleans()):
            case.body = valid_body(draw, content)
    elif operation == "snapshot":
        case.method, case.headers, case.body = "PUT", [content_type], valid_body(draw, content)
        case.path_suffix = "/snapshot/0000000000000001_0000000000000000"
    elif operation == "other":
        case.method = draw(st.sampled_from(METHODS))
        case.whole_path = draw(st.one_of(st.none(), st.sampled_from(WHOLE_PATHS)))
        case.query = draw(st.lists(st.sampled_from(sorted(QUERY_VALUES)).flatmap(query_pair), max_size=3))
    else:
        case.method = "HEAD" if operation == "head" else "DELETE"
    for _ in range(draw(st.sampled_from([0, 1, 1, 2, 3]))):
        mutate(draw, case)
    return case


def query_pair(key: str) -> st.SearchStrategy[tuple[str, str]]:
    return st.tuples(st.just(key), hostile_value(QUERY_VALUES[key]))


def header_pair(name: str) -> st.SearchStrategy[tuple[bytes, bytes]]:
    return st.tuples(st.just(name.encode()), header_value(name))


def mutate(draw: st.DrawFn, case: Hostile) -> None:
    """One hostile change: most often to a field the request already has."""
    kind = draw(st.sampled_from(["field", "field", "field", "header", "query", "path", "method", "body"]))
    fields = [("query", i) for i in range(len(case.query))] + [("header", i) for i in range(len(case.headers))]
    if kind == "field" and fields:
        where, index = draw(st.sampled_from(fields))
        if where == "query":
            case.query[index] = draw(query_pair(case.query[index][0]))
        else:
            case.headers[index] = draw(header_pair(case.headers[index][0].decode()))
    elif kind in ("field", "header"):
        case.headers.append(draw(st.sampled_from(sorted(HEADER_VALUES)).flatmap(header_pair)))
    elif kind == "query":
        case.query.append(draw(st.sampled_from(sorted(QUERY_VALUES)).flatmap(query_pair)))
    elif kind == "path":
        choice = draw(st.sampled_from(["suffix", "whole", "raw"]))
        if choice == "suffix":
            case.path_suffix = draw(st.sampled_from(PATH_SUFFIXES))
        elif choice == "whole":
            case.whole_path = draw(st.sampled_from(WHOLE_PATHS))
        else:
            case.raw_query = draw(st.sampled_from(RAW_QUERIES))
    elif kind == "method":
        case.method = draw(st.sampled_from(METHODS))
    else:
        case.body, case.chunked = draw(hostile_body), draw(st.booleans())


# -- the server and its streams -----------------------------------------------------------


@dataclass
class Fuzzed:
    """The server under fuzz and its seeded streams (re-seeded under a new name whenever a
    successful request deleted or closed one, so later requests still hit live data).
    With auth on, every request carries an admin token first (a generated Authorization
    header comes after it and is ignored, or makes the request a 401)."""

    server: ServerProcess
    token_headers: list[tuple[bytes, bytes]]
    http: requests.Session = field(default_factory=session)
    seeded: dict[tuple[str, str], str] = field(default_factory=dict)
    names: Iterator[int] = field(default_factory=itertools.count)

    def path(self, surface: str, name: str) -> str:
        return f"/v1/stream/fz/{name}" if surface == "base" else f"/{BUCKET}/{name}"

    def seeded_path(self, surface: str, content: str) -> str:
        path = self.seeded.get((surface, content))
        if path is not None:
            head = self.http.head(self.server.url + path)
            if head.status_code == 200 and head.headers.get("Stream-Closed") != "true":
                return path
        path = self.path(surface, f"{content}-{next(self.names)}")
        url, headers = self.server.url + path, {"Content-Type": CONTENT_TYPES[content]}
        assert self.http.put(url, headers=headers).status_code == 201
        for message in SEED[content]:
            assert self.http.post(url, headers=headers, data=message).status_code == 204
        self.seeded[(surface, content)] = path
        return path

    def lsn(self) -> float:
        match = LSN_LINE.search(self.http.get(f"{self.server.url}/metrics").text)
        assert match is not None, "durable_streams_last_lsn is missing from /metrics"
        return float(match.group(1))

    def fingerprint(self, seeded: str, fresh: str | None) -> tuple[object, ...]:
        """The seeded stream's metadata and content -- through /bootstrap: a snapshot makes
        the history before it unreadable (410) -- whether ``fresh`` exists, and the LSN."""
        url = self.server.url + seeded
        head = self.http.head(url)
        metadata = tuple(head.headers.get(name) for name in FINGERPRINT_HEADERS)
        boot = get_bootstrap(self.http, url)
        content = (boot.snapshot_offset, boot.next_offset, boot.snapshot, boot.updates)
        fresh_status = self.http.head(self.server.url + fresh).status_code if fresh is not None else None
        return self.lsn(), head.status_code, metadata, content, fresh_status


@pytest.fixture(scope="module", params=["open", "auth"])
def fuzzed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    """The server both without auth and with it (whose middleware parses every path and
    Stream-Forked-From before any route does)."""
    directory = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    args = [
        "--long-poll-timeout-ms",
        "100",
        "--sse-reconnect-ms",
        "200",
        "--max-body-bytes",
        str(MAX_BODY),
        "--max-header-bytes",
        "8192",
        "--request-timeout-s",
        "2",
    ]
    token_headers = []
    if request.param == "auth":
        token = new_token("fuzz-admin")
        args += ["--auth-tokens-file", str(write_tokens(directory / "tokens.json", [ADMIN | {"token": token}]))]
        token_headers = [(b"Authorization", f"Bearer {token}".encode())]
    server = ServerProcess(directory / "data", args).start()
    try:  # (killed if the set-up fails too)
        state = Fuzzed(server, token_headers)
        state.http.headers.update({name.decode(): value.decode() for name, value in token_headers})
        assert state.http.put(f"{server.url}/{BUCKET}").status_code == 201
        yield state
    finally:
        server.kill()
    assert "Traceback" not in server.log_text(), server.log_text()[-4000:]


def encode_query(case: Hostile) -> bytes:
    pairs = "&".join(f"{quote(key, safe='')}={quote(value, safe='')}" for key, value in case.query)
    if case.raw_query is not None:
        pairs = f"{pairs}&{case.raw_query}" if pairs else case.raw_query
    return f"?{pairs}".encode() if pairs else b""


def check_refusal(response: RawResponse, method: str) -> None:
    if response.status == 400 and response.headers.get("content-type") == "text/plain; charset=utf-8":
        assert response.body in (UVICORN_PARSE_ERROR, b""), response.body  # (HEAD: no body)
        return  # h11 refused the bytes before any app code ran
    if method == "HEAD":
        assert response.headers.get("content-type") == "application/json", response.headers
    else:
        response.json_error()


def send(state: Fuzzed, case: Hostile) -> None:
    seeded = state.seeded_path(case.surface, case.content)
    fresh = state.path(case.surface, f"new-{next(state.names)}") if case.fresh else None
    target = case.whole_path if case.whole_path is not None else (fresh or seeded) + case.path_suffix
    headers = state.token_headers + [
        (name, value.replace(SEEDED.encode(), seeded.encode())) for name, value in case.headers
    ]
    data = request_bytes(
        case.method, target.encode("latin-1") + encode_query(case), headers, case.body, chunked=case.chunked
    )
    before = state.fingerprint(seeded, fresh)
    response = exchange(state.server.port, data, case.method)
    event(f"{case.operation}: {response.status}")  # the spread shows with --hypothesis-show-statistics
    assert response.status < 500, (response.status, response.body[:500], data[:500])
    if response.status >= 400:
        check_refusal(response, case.method)
        assert state.fingerprint(seeded, fresh) == before, (response.status, response.body[:300], data[:500])


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=hostile())
def test_hostile_requests_never_500_and_refusals_change_nothing(fuzzed: Fuzzed, case: Hostile) -> None:
    send(fuzzed, case)


# -- the parsers, directly ----------------------------------------------------------------

raw_text = st.one_of(
    st.text(),
    st.sampled_from([*OFFSETS, *NUMBERS, *HOSTILE_TEXT]),
    st.text(alphabet="0123456789²٣_-+.eE:TtZz ", max_size=40),
    st.from_regex(r"[0-9]{1,40}", fullmatch=True),
    st.from_regex(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", fullmatch=True),
)
PARSERS: list[Callable[[str], object]] = [
    h.parse_ttl,
    h.parse_expires_at,
    h.parse_content_type,
    h.is_closed_flag,
    lambda raw: h.parse_non_negative_int("X-Test", raw),
    lambda raw: h.parse_producer(raw, raw, raw),
    lambda raw: h.parse_producer("p", raw, "0"),
    parse_offset,
    lambda raw: response_cursor(raw, time.time()),
    validate_bucket_id,
    lambda raw: validate_stream_id("abcd", raw),
    lambda raw: validate_base_path("v1/stream/" + raw),
    stream_name_from_reference,
]


@settings(max_examples=2000, deadline=None, derandomize=True, database=None)
@given(raw=raw_text)
def test_header_and_id_parsers_refuse_only_with_bad_request(raw: str) -> None:
    for parse in PARSERS:
        with contextlib.suppress(BadRequest):
            parse(raw)


@settings(max_examples=1000, deadline=None, derandomize=True, database=None)
@given(raw=st.one_of(st.binary(max_size=64), st.text().map(lambda text: text.encode("utf-8", "surrogatepass"))))
def test_byte_parsers_refuse_only_with_bad_request(raw: bytes) -> None:
    for parse in (validate_raw_path, lambda data: split_messages(data, allow_empty_array=False)):
        with contextlib.suppress(BadRequest):
            parse(raw)
