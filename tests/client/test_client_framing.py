"""The incremental parsers on every way a body can be split into network chunks."""

from __future__ import annotations

import json

import pytest

from pyspark_durable_streams.client._framing import Part, iter_json_array, iter_parts, multipart_boundary
from pyspark_durable_streams.client.reading import _utf8_boundary

MULTIPART = (
    b"preamble\r\n--b1\r\nContent-Type: a/b\r\nStream-Offset: 7\r\n\r\nhello\r\n"
    b"--b1\r\n\r\n\r\n"  # no headers, empty body
    b"--b1\r\nX: y\r\n\r\nwith \r\n--b inside\r\n"
    b"--b1--\r\n"
)
EXPECTED_PARTS = [
    Part({"content-type": "a/b", "stream-offset": "7"}, b"hello"),
    Part({}, b""),
    Part({"x": "y"}, b"with \r\n--b inside"),
]
VALUES = [{"a": 'x,]\\"}'}, "q\\", 1, [1, [2, {"b": []}]], '"', None, "end\\", "é"]


def chunked(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 1000])
def test_multipart_parts_survive_any_chunking(size: int) -> None:
    assert list(iter_parts(chunked(MULTIPART, size), "b1")) == EXPECTED_PARTS


def test_truncated_multipart_is_an_error() -> None:
    with pytest.raises(ValueError):
        list(iter_parts([MULTIPART[:-12]], "b1"))


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_json_array_items_are_exact_bytes_under_any_chunking(size: int) -> None:
    body = (" [ " + " ,\n".join(json.dumps(v, ensure_ascii=False) for v in VALUES) + " ] ").encode()
    items = list(iter_json_array(chunked(body, size)))
    assert [json.loads(item) for item in items] == VALUES
    assert list(iter_json_array([b"[]"])) == []
    with pytest.raises(ValueError):
        list(iter_json_array([b'[1, "unterminated']))


def test_boundary_parameter_and_utf8_cuts() -> None:
    assert multipart_boundary('multipart/mixed; boundary="a b"') == "a b"
    assert multipart_boundary("multipart/mixed;boundary=abc;x=1") == "abc"
    assert multipart_boundary("application/json") is None
    text = bytearray("aé€😀".encode())
    for cut in range(len(text) + 1):
        prefix = text[:cut]
        prefix[: _utf8_boundary(prefix)].decode("utf-8")  # never ends inside a character
