"""JSON mode (spec section 7.1): validation, one-level array flattening, framing."""

from __future__ import annotations

import json

import pytest

from durable_streams_server.protocol.errors import BadRequest
from durable_streams_server.protocol.json_mode import frame, split_messages


def _reject(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def split(body: bytes, *, allow_empty_array: bool = False) -> list[bytes]:
    return split_messages(body, allow_empty_array=allow_empty_array)


def test_object_is_one_compact_message() -> None:
    assert split(b'{ "event" : "created" ,\n "n": [1, 2] }') == [b'{"event":"created","n":[1,2]}']


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'[{"event": "a"}, {"event": "b"}]', [b'{"event":"a"}', b'{"event":"b"}']),
        (b"[[1,2], [3,4]]", [b"[1,2]", b"[3,4]"]),
        (b"[[[1,2,3]]]", [b"[[1,2,3]]"]),
        (b"[[]]", [b"[]"]),
        (b'[1, "two", null, true, false, 2.5, {}]', [b"1", b'"two"', b"null", b"true", b"false", b"2.5", b"{}"]),
    ],
)
def test_top_level_array_is_flattened_exactly_one_level(body: bytes, expected: list[bytes]) -> None:
    assert split(body) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"42", b"42"),
        (b'"text"', b'"text"'),
        (b"null", b"null"),
        (b"true", b"true"),
        (b" -0.5 ", b"-0.5"),
    ],
)
def test_scalars_are_single_messages(body: bytes, expected: bytes) -> None:
    assert split(body) == [expected]


def test_empty_array_rejected_on_append() -> None:
    with pytest.raises(BadRequest) as excinfo:
        split(b"[]", allow_empty_array=False)
    assert excinfo.value.code == "EMPTY_JSON_ARRAY"
    with pytest.raises(BadRequest):
        split(b" [ ] ", allow_empty_array=False)


def test_empty_array_allowed_on_create() -> None:
    assert split(b"[]", allow_empty_array=True) == []
    assert split(b"[[]]", allow_empty_array=True) == [b"[]"]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"{",
        b"[1,2",
        b"{'a': 1}",
        b"[1,]",
        b'{"a":1,}',
        b"undefined",
        b"1 2",
        b"{} {}",
        b"[1][2]",
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"[1, NaN]",
        b'{"x": Infinity}',
        b"[[-Infinity]]",
        b"\xff\xfe",
        b'"caf\xe9"',
        b'["\xc3"]',
        b"\xef\xbb\xbf{}",
    ],
)
@pytest.mark.parametrize("allow_empty_array", [False, True])
def test_invalid_bodies_rejected(body: bytes, allow_empty_array: bool) -> None:
    with pytest.raises(BadRequest) as excinfo:
        split(body, allow_empty_array=allow_empty_array)
    assert excinfo.value.status == 400
    assert excinfo.value.code == "INVALID_JSON"


def test_unicode_preserved_as_utf8() -> None:
    body = '{"greeting": "héllo wörld ☃ 日本語 😀", "escaped": "\\u00e9"}'.encode()
    (message,) = split(body)
    assert message == '{"greeting":"héllo wörld ☃ 日本語 😀","escaped":"é"}'.encode()
    assert json.loads(message) == {"greeting": "héllo wörld ☃ 日本語 😀", "escaped": "é"}


def test_messages_round_trip_to_equal_values() -> None:
    values = [{"a": [1, {"b": None}]}, "x", 1.5, [["nested"]], {"k": '\n\t"quoted"'}]
    messages = split(json.dumps(values).encode())
    assert [json.loads(m) for m in messages] == values


def test_frame_joins_messages_into_array() -> None:
    assert frame([]) == b"[]"
    assert frame([b'{"a":1}']) == b'[{"a":1}]'
    assert frame(iter([b"1", b'"two"', b"[3]"])) == b'[1,"two",[3]]'


def test_frame_of_split_is_equivalent_json() -> None:
    body = b'[{"event": "a"}, [1, 2], "s", 3]'
    assert json.loads(frame(split(body))) == json.loads(body)
    single = b'{"only": true}'
    assert json.loads(frame(split(single))) == [json.loads(single)]


@pytest.mark.parametrize(
    "body",
    [b"1e400", b'{"a": -1e999}', b'"\\ud800"', b"[" * 100_000],
    ids=[
        "float-overflow",
        "nested-float-overflow",
        "lone-surrogate",
        "deep-nesting",
    ],
)
def test_parseable_but_unencodable_bodies_are_bad_requests(body: bytes) -> None:
    try:
        messages = split(body)
    except BadRequest as exc:
        assert exc.status == 400
    else:  # storing it is also acceptable, as long as what is stored is valid UTF-8 JSON
        assert messages
        for message in messages:
            json.loads(message.decode("utf-8"), parse_constant=_reject)  # must not raise
