"""Live-mode cursors (spec section 8.1): interval numbers that never go backwards.

A cursor is the number of fixed intervals since an epoch. When a client echoes a cursor
that is not behind the current interval, the answer jumps ahead by a random jitter so
that a CDN can never serve the same cached empty response in a loop.
"""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime

CURSOR_EPOCH_S = datetime(2024, 10, 9, tzinfo=UTC).timestamp()
CURSOR_INTERVAL_S = 20
_MIN_JITTER_S = 1
_MAX_JITTER_S = 3600
_CURSOR_RE = re.compile(r"[0-9]{1,18}")  # ASCII digits only ('²'.isdigit()), and few of them


def current_interval(now_s: float) -> int:
    return int((now_s - CURSOR_EPOCH_S) // CURSOR_INTERVAL_S)


def response_cursor(client_cursor: str | None, now_s: float, rng: random.Random | None = None) -> str:
    interval = current_interval(now_s)
    if not client_cursor or not _CURSOR_RE.fullmatch(client_cursor):
        return str(interval)
    client_interval = int(client_cursor)
    if client_interval < interval:
        return str(interval)
    jitter_s = (rng or random).randint(_MIN_JITTER_S, _MAX_JITTER_S)
    return str(client_interval + max(1, -(-jitter_s // CURSOR_INTERVAL_S)))
