"""``protocol.byte_ranges``: which bytes of a file a ``Range`` header asks for."""

from __future__ import annotations

import pytest

from durable_streams_server.protocol.byte_ranges import byte_range
from durable_streams_server.protocol.errors import RangeNotSatisfiable


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-3", (0, 4)),
        ("bytes=10-", (10, 100)),
        ("bytes=90-200", (90, 100)),  # the end is clipped to the file
        ("bytes=-4", (96, 100)),  # the last four bytes
        ("bytes=-500", (0, 100)),  # a suffix longer than the file: all of it
        ("bytes=99-99", (99, 100)),
        (" Bytes = 5 - 6 ", (5, 7)),
    ],
)
def test_one_range(header: str, expected: tuple[int, int]) -> None:
    assert byte_range(header, 100) == expected


@pytest.mark.parametrize(
    "header",
    [None, "bytes=0-1,5-6", "items=0-3", "bytes=3-1", "bytes=", "bytes=-", "bytes=-0", "bytes=a-3", "bytes=²-3", "0-3"],
)
def test_ignored_headers_mean_the_whole_file(header: str | None) -> None:
    assert byte_range(header, 100) is None


@pytest.mark.parametrize(("header", "size"), [("bytes=100-", 100), ("bytes=150-160", 100), ("bytes=0-0", 0)])
def test_a_range_past_the_end_is_refused_naming_the_size(header: str, size: int) -> None:
    with pytest.raises(RangeNotSatisfiable) as refused:
        byte_range(header, size)
    assert refused.value.status == 416 and refused.value.headers == {"Content-Range": f"bytes */{size}"}
