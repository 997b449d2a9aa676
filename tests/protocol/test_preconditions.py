"""The conditional-append rule (``protocol.preconditions``), without a server: what ``If-Match``
values parse, what is refused and how, and what a failed comparison answers."""

from __future__ import annotations

import pytest

from durable_streams_server.protocol import preconditions
from durable_streams_server.protocol.errors import BadRequest, PreconditionFailed
from durable_streams_server.protocol.offsets import Offset

TAIL_3 = "0000000000000003_0000000000000000"


def test_a_quoted_offset_parses() -> None:
    assert preconditions.parse(f'"{TAIL_3}"', producer=False) == Offset(3)
    assert preconditions.parse(f' "{TAIL_3}" ', producer=False) == Offset(3)


@pytest.mark.parametrize("raw", ["*", TAIL_3, f'W/"{TAIL_3}"', f'"{TAIL_3}", "{TAIL_3}"', '"3"', '"-1"', '""', '"'])
def test_anything_else_is_400(raw: str) -> None:
    with pytest.raises(BadRequest) as refused:
        preconditions.parse(raw, producer=False)
    assert refused.value.code == "INVALID_PRECONDITION"


def test_star_says_it_is_not_supported() -> None:
    with pytest.raises(BadRequest, match="not supported"):
        preconditions.parse("*", producer=False)


def test_producer_headers_are_refused_first() -> None:
    with pytest.raises(BadRequest, match="Producer-Id") as refused:
        preconditions.parse(f'"{TAIL_3}"', producer=True)
    assert refused.value.code == "INVALID_PRECONDITION"


def test_check() -> None:
    preconditions.check(Offset(3), 3)
    with pytest.raises(PreconditionFailed) as failed:
        preconditions.check(Offset(2), 3)
    error = failed.value
    assert (error.status, error.code) == (412, "PRECONDITION_FAILED")
    assert error.headers == {"ETag": f'"{TAIL_3}"', "Stream-Next-Offset": TAIL_3}
    assert TAIL_3 in error.message
    with pytest.raises(PreconditionFailed):
        preconditions.check(Offset(3, 1), 3)  # (inside a message: never a tail)


def test_etag() -> None:
    assert preconditions.etag(3) == f'"{TAIL_3}"'
