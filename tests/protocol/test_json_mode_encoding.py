"""``split_messages`` stores exactly what ``json.JSONEncoder(ensure_ascii=False, separators=(",", ":"),
allow_nan=False).encode`` writes for each element: the faster encoder it uses must not change a byte."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_streams_server.protocol.errors import BadRequest
from durable_streams_server.protocol.json_mode import split_messages

_REFERENCE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(blacklist_categories=["Cs"]))
)
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
)


def _reference(body: bytes) -> list[bytes]:
    value = json.loads(body)
    items = value if isinstance(value, list) else [value]
    return [_REFERENCE(item).encode() for item in items]


@settings(max_examples=300, deadline=None)
@given(st.lists(_values, min_size=1, max_size=6))
def test_every_element_is_stored_as_the_reference_encoder_writes_it(values: list[Any]) -> None:
    body = json.dumps(values, indent=1, ensure_ascii=True).encode()  # spaced and \u-escaped on the way in
    assert split_messages(body, allow_empty_array=False) == _reference(body)


@pytest.mark.parametrize(
    "body",
    [
        b'["\\u00e9\\/\\t\\u0001\\"", 1E3, 1.50, -0, 0.1, 1e16, 5e-324, {"a": 1, "a": 2}]',
        b'{"\\ud83d\\ude00": [true, false, null, 123456789012345678901234567890]}',
        b'"plain"',
    ],
)
def test_tricky_spellings(body: bytes) -> None:
    assert split_messages(body, allow_empty_array=False) == _reference(body)


@pytest.mark.parametrize("body", [b"[1e400]", b'["\\ud800"]', b"[NaN]"])
def test_values_the_encoder_cannot_store_are_invalid_json(body: bytes) -> None:
    with pytest.raises(BadRequest) as caught:
        split_messages(body, allow_empty_array=False)
    assert caught.value.code == "INVALID_JSON"
