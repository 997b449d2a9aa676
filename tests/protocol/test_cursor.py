"""Live-mode cursors (spec section 8.1): interval numbers that never go backwards."""

from __future__ import annotations

import random

import pytest

from durable_streams_server.protocol.cursor import (
    CURSOR_EPOCH_S,
    CURSOR_INTERVAL_S,
    current_interval,
    response_cursor,
)

NOW_S = CURSOR_EPOCH_S + 1000 * CURSOR_INTERVAL_S + 7.5  # inside interval 1000
MAX_STEP = -(-3600 // CURSOR_INTERVAL_S)  # 1-3600 s of jitter is at most this many intervals


def test_epoch_is_2024_10_09_utc() -> None:
    assert CURSOR_EPOCH_S == 1728432000.0
    assert CURSOR_INTERVAL_S == 20


@pytest.mark.parametrize(
    ("offset_s", "expected"),
    [
        (0.0, 0),
        (19.999, 0),
        (20.0, 1),
        (39.0, 1),
        (40.0, 2),
        (1000 * 20 + 7.5, 1000),
        (-0.5, -1),
    ],
)
def test_current_interval(offset_s: float, expected: int) -> None:
    assert current_interval(CURSOR_EPOCH_S + offset_s) == expected


@pytest.mark.parametrize("client_cursor", [None, "", "abc", "-5", "12.5", " 1000"])
def test_no_usable_client_cursor_gives_current_interval(client_cursor: str | None) -> None:
    assert response_cursor(client_cursor, NOW_S, random.Random(0)) == "1000"


@pytest.mark.parametrize("client_cursor", ["0", "1", "500", "999", "0999"])
def test_client_cursor_behind_gives_current_interval(client_cursor: str) -> None:
    assert response_cursor(client_cursor, NOW_S, random.Random(0)) == "1000"


@pytest.mark.parametrize("client_cursor", [1000, 1001, 1050, 10**12])
def test_client_cursor_at_or_ahead_advances_strictly(client_cursor: int) -> None:
    rng = random.Random(1234)
    results = set()
    for _ in range(500):
        cursor = response_cursor(str(client_cursor), NOW_S, rng)
        assert cursor.isdigit()
        assert client_cursor < int(cursor) <= client_cursor + MAX_STEP
        results.add(int(cursor))
    assert len(results) > 1  # jitter, not a constant step


def test_same_seed_gives_same_cursor() -> None:
    first = [response_cursor("1000", NOW_S, random.Random(99)) for _ in range(3)]
    assert len(set(first)) == 1


def test_echoing_cursors_never_goes_backwards() -> None:
    rng = random.Random(7)
    now_s = NOW_S
    cursor: str | None = None
    previous = -1
    for _ in range(2000):
        now_s += rng.choice([0.0, 0.0, 1.0, 19.0, 60.0])
        cursor = response_cursor(cursor, now_s, rng)
        value = int(cursor)
        assert value >= current_interval(now_s)
        assert value > previous  # every echo yields a strictly newer cache key
        previous = value
