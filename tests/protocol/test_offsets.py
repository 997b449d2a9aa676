"""Offset tokens (spec section 6): fixed width, one spelling per position, string order is stream order."""

from __future__ import annotations

import random

import pytest

from durable_streams_server.protocol.errors import BadRequest
from durable_streams_server.protocol.offsets import ZERO, Offset, encode_seq, parse_offset

MAX_FIELD = 10**16 - 1
VALID = "0000000000000001_0000000000000002"


def _random_offsets(seed: int, count: int) -> list[Offset]:
    rng = random.Random(seed)
    edges = [0, 1, 9, 10, 99, 10**8, MAX_FIELD - 1, MAX_FIELD]
    result = []
    for _ in range(count):
        seq = rng.choice(edges) if rng.random() < 0.3 else rng.randint(0, MAX_FIELD)
        within = rng.choice(edges) if rng.random() < 0.3 else rng.randint(0, MAX_FIELD)
        result.append(Offset(seq, within))
    return result


def test_encode_known_value() -> None:
    assert Offset(42, 7).encode() == "0000000000000042_0000000000000007"
    assert str(Offset(42, 7)) == "0000000000000042_0000000000000007"
    assert ZERO.encode() == "0000000000000000_0000000000000000"
    assert Offset(5).within == 0


def test_round_trip_and_fixed_width() -> None:
    for offset in _random_offsets(seed=1, count=2000):
        token = offset.encode()
        assert len(token) == 33
        assert token[16] == "_"
        assert parse_offset(token) == offset
        assert parse_offset(token).encode() == token


def test_lexicographic_order_matches_numeric_order() -> None:
    offsets = _random_offsets(seed=2, count=3000)
    by_value = sorted(offsets)
    by_token = sorted(offsets, key=lambda offset: offset.encode())
    assert [o.encode() for o in by_value] == [o.encode() for o in by_token]
    rng = random.Random(3)
    for _ in range(3000):
        a, b = rng.choice(offsets), rng.choice(offsets)
        assert (a < b) == (a.encode() < b.encode())
        assert (a == b) == (a.encode() == b.encode())


def test_order_across_digit_count_boundaries() -> None:
    # Without padding "10" < "9"; with it, string order must still be numeric order.
    assert Offset(9).encode() < Offset(10).encode()
    assert Offset(1, MAX_FIELD).encode() < Offset(2, 0).encode()
    assert Offset(3, 9).encode() < Offset(3, 10).encode()


def test_encode_seq_is_message_boundary() -> None:
    rng = random.Random(4)
    for seq in [0, 1, MAX_FIELD, *(rng.randint(0, MAX_FIELD) for _ in range(500))]:
        assert encode_seq(seq) == Offset(seq, 0).encode()
        assert parse_offset(encode_seq(seq)) == Offset(seq, 0)
    assert encode_seq(12) == "0000000000000012_0000000000000000"


@pytest.mark.parametrize(
    "token",
    [
        "",
        "-1",
        "now",
        VALID[:-1],
        VALID + "0",
        "0" * 33,
        "0000000000000001-0000000000000002",
        "00000000000000010_000000000000002",
        "000000000000001_00000000000000002",
        "000000000000000a_0000000000000002",
        "0000000000000001_000000000000000x",
        "000000000000000\u0661_0000000000000002",
        "0000000000000001_000000000000000\u0662",
        "000000000000000\u00b2_0000000000000002",
        "+000000000000001_0000000000000002",
        "-000000000000001_0000000000000002",
        "0000000000000001_+000000000000002",
        " 000000000000001_0000000000000002",
        "0000000000000001_000000000000002 ",
        "0000000000000001 0000000000000002",
        "0000000000000001_0000000 00000002",
        VALID[1:] + "\n",
    ],
)
def test_malformed_tokens_raise_bad_request(token: str) -> None:
    with pytest.raises(BadRequest) as excinfo:
        parse_offset(token)
    assert excinfo.value.status == 400
    assert excinfo.value.code == "INVALID_OFFSET"


def test_valid_token_parses() -> None:
    assert parse_offset(VALID) == Offset(1, 2)
