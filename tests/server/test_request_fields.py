"""``http.request_fields`` answers what Starlette's ``QueryParams`` and ``Headers`` answer, for
any query string and any header list (the read handler takes its parameters from it on both
the ASGI path and the fast path)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.datastructures import Headers, QueryParams

from durable_streams_server.http.request_fields import header, query

_QUERY_BYTES = st.lists(
    st.sampled_from([b"&", b"=", b"%", b"+", b";", b"%2B", b"%26", b"%3D", b"%zz", b"%C3%A9", b"\xe9", b" "])
    | st.sampled_from([b"offset", b"live", b"cursor", b"end", b"-1", b"now", b"long-poll", b"a", b"0_1"]),
    max_size=12,
).map(b"".join)


@settings(max_examples=600, deadline=None)
@given(_QUERY_BYTES)
def test_query_reads_as_starlette(raw: bytes) -> None:
    ours = query({"query_string": raw})
    theirs = QueryParams(raw)
    for name in [*theirs.keys(), "offset", "live", "cursor", "missing"]:
        assert ours.getlist(name) == theirs.getlist(name), (raw, name)
        assert ours.get(name) == theirs.get(name), (raw, name)


def test_query_examples() -> None:
    params = query({"query_string": b"offset=1&offset=2&live&cursor=a=b&&end="})
    assert params.getlist("offset") == ["1", "2"]
    assert params.get("offset") == "2"  # (the last, as Starlette's)
    assert params.get("live") == ""
    assert params.get("cursor") == "a=b"
    assert params.get("end") == ""
    assert params.get("missing") is None and params.getlist("missing") == []
    assert query({"query_string": b"cursor=a%2Bb+c"}).get("cursor") == "a+b c"
    assert query({}).getlist("offset") == []


_NAMES = st.sampled_from([b"accept", b"if-none-match", b"host", b"content-type", b"x-other"])
_VALUES = st.binary(max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=6), _NAMES)
def test_header_reads_as_starlette(headers: list[tuple[bytes, bytes]], name: bytes) -> None:
    scope = {"headers": headers}
    assert header(scope, name) == Headers(scope={"headers": list(headers)}).get(name.decode())
