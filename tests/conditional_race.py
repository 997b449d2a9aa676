"""The conditional-append race (issue 44's measure): writers on one stream for a while, each
appending at the tail it last learned (from its last answer's ``ETag`` or ``412``, now and then a
HEAD), then the whole history read back and checked: one winner per offset, every acknowledged
append stored exactly once at the offset it named, nothing stored that was not acknowledged, and
every ``412`` naming a tail the stream had reached and no older than one already acknowledged.
Used on a single server (``tests/server/test_conditional_appends.py``) and through a cluster node."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import requests
from servers import session

JSON = {"Content-Type": "application/json"}
WRITERS = 32
RACE_S = 10.0


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[int, str] = field(default_factory=dict)
    """Offset each acknowledged append named -> its message."""
    doubly_acked: list[int] = field(default_factory=list)
    refusals: int = 0
    bad_refusals: list[tuple[int, int, int]] = field(default_factory=list)
    """(named, refused offset, the highest acknowledged tail before the request): a 412 that named
    a tail at or below the one it refused, or below one already acknowledged when it was sent."""
    highest_named: int = 0
    highest_acked_tail: int = 0
    failures: list[str] = field(default_factory=list)


def _seq(token: str) -> int:
    return int(token.strip('"').split("_")[0])


def _writer(url: str, index: int, deadline: float, tally: Tally) -> None:
    http = session()
    known: int | None = None
    n = 0
    try:
        while time.monotonic() < deadline:
            if known is None or n % 16 == 0:  # mostly chained through ETags, now and then a HEAD
                known = _seq(http.head(url, allow_redirects=True, timeout=30).headers["Stream-Next-Offset"])
            message = json.dumps(f"w{index}-{n}")
            with tally.lock:
                acked_before = tally.highest_acked_tail
            answer = http.post(
                url, data=message, headers={**JSON, "If-Match": f'"{known:016d}_0000000000000000"'}, timeout=30
            )
            n += 1
            if answer.status_code == 204:
                new_tail = _seq(answer.headers["ETag"])
                with tally.lock:
                    if known in tally.acked:
                        tally.doubly_acked.append(known)
                    tally.acked[known] = message
                    tally.highest_acked_tail = max(tally.highest_acked_tail, new_tail)
                if new_tail != known + 1:
                    tally.failures.append(f"ETag {new_tail} after an append at {known}")
                known = new_tail
            elif answer.status_code == 412:
                named = _seq(answer.headers["ETag"])
                if _seq(answer.headers["Stream-Next-Offset"]) != named:
                    tally.failures.append(f"412 headers disagree: {answer.headers}")
                with tally.lock:
                    tally.refusals += 1
                    tally.highest_named = max(tally.highest_named, named)
                    if named < acked_before or named <= known:
                        tally.bad_refusals.append((named, known, acked_before))
                known = named
            else:
                tally.failures.append(f"{answer.status_code}: {answer.text}")
                return
    except Exception as exc:  # (reported by the test)
        tally.failures.append(repr(exc))


def _read_messages(http: requests.Session, url: str) -> list[str]:
    messages: list[str] = []
    token = "-1"
    while True:
        answer = http.get(url, params={"offset": token}, timeout=30)
        assert answer.status_code == 200, answer.text
        messages.extend(json.dumps(value) for value in answer.json())
        token = answer.headers["Stream-Next-Offset"]
        if answer.headers.get("Stream-Up-To-Date") == "true":
            return messages


def run_race(url: str, writers: int = WRITERS, seconds: float = RACE_S) -> Tally:
    """``writers`` threads racing on ``url`` for ``seconds``."""
    tally = Tally()
    deadline = time.monotonic() + seconds
    threads = [threading.Thread(target=_writer, args=(url, i, deadline, tally)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 60)
    return tally


def check_race(http: requests.Session, url: str, tally: Tally) -> str:
    """Assert the race's outcome against the stream's whole history; a one-line summary."""
    assert tally.failures == []
    stored = _read_messages(http, url)
    lost = [at for at, message in tally.acked.items() if at >= len(stored) or stored[at] != message]
    duplicates = len(stored) - len(set(stored))
    summary = (
        f"{len(tally.acked)} acknowledged, {tally.refusals} refused (412), {len(stored)} stored, "
        f"duplicates {duplicates}, lost {len(lost)}"
    )
    assert len(tally.acked) > WRITERS, summary  # (the race ran)
    assert tally.refusals > 0, summary  # (and writers did collide)
    assert tally.doubly_acked == []  # one winner per offset
    assert lost == []
    assert duplicates == 0
    assert len(stored) == len(tally.acked)  # nothing stored that was not acknowledged
    assert sorted(tally.acked) == list(range(len(stored)))  # every offset won exactly once
    assert tally.bad_refusals == []
    assert tally.highest_named <= len(stored)  # (every 412 named a tail the stream reached)
    return summary
