"""Time lookups (``Stream.offset_at``) against real servers: the first offset appended at or
after a time, answered from Delta statistics once flushed and from the memory tail before;
a clear 400 for a bad timestamp; the reference server has no such extension."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import requests
from append_times import after, append_times
from client_support import unique
from servers import ServerProcess, wait_for

from pyspark_durable_streams.client import Client, Stream, TimeLookupUnavailable

GROUPS, PER_GROUP = 3, 5


def offset_at(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


def _append_groups(stream: Stream, flushed: bool) -> list[int]:
    """Three appends of five messages, each appended in a later millisecond than the one
    before (waited for on the clock); the append time of every message, in ms."""
    stream.create("application/json")
    for group in range(GROUPS):
        if group:
            after(append_times(stream)[-1])
        stream.append_many([f'{{"n":{group * PER_GROUP + i}}}'.encode() for i in range(PER_GROUP)])
        if flushed:  # each append lands in a data file of its own, and leaves memory
            tail = stream.metadata().next_offset
            wait_for(lambda tail=tail: stream.read_plan("-1").delta_end == tail, timeout_s=30)
    return append_times(stream)


def _expected(stamps: list[int], at: int) -> str | None:
    later = [seq for seq, ts in enumerate(stamps) if ts >= at]
    return offset_at(later[0]) if later else None


@pytest.mark.parametrize(
    "flushed, args",
    [
        (True, ("--flush-interval-ms", "50", "--tail-cache-bytes", "0")),
        (False, ("--flush-interval-ms", "3600000")),
    ],
    ids=["from-delta-statistics", "from-the-memory-tail"],
)
def test_first_offset_at_or_after_a_time(
    server_factory: Callable[..., ServerProcess], flushed: bool, args: tuple[str, ...]
) -> None:
    server = server_factory(*args)
    with Client(server.url) as client:
        stream = client.stream(f"v1/stream/{unique('times')}")
        stamps = _append_groups(stream, flushed)
        assert len(set(stamps)) >= GROUPS  # the groups have distinct times
        second, third = stamps[PER_GROUP], stamps[2 * PER_GROUP]
        assert stamps[PER_GROUP - 1] < second < third
        asked = [0, stamps[0], stamps[PER_GROUP - 1] + 1, second, third - 1, third, stamps[-1], stamps[-1] + 1]
        for at in asked:
            found = stream.offset_at(at)
            assert (found.timestamp, found.offset) == (at, _expected(stamps, at)), at
            assert found.next_offset == offset_at(GROUPS * PER_GROUP)
        assert stream.offset_at(stamps[-1] + 1).offset is None  # after every message


def test_a_bad_timestamp_is_a_400_naming_it(server: ServerProcess) -> None:
    url = server.stream_url(unique("bad-times"))
    with Client(server.url) as client:
        client.stream(url).create("application/json")
    accept = {"Accept": "application/vnd.durable-streams.offset-for-time+json"}
    for raw in ("", "soon", "-5", str(2**53), "\u00b2", "\u0661\u0662"):  # (superscript two, Arabic-Indic digits)
        response = requests.get(url, params={"timestamp": raw}, headers=accept, timeout=10)
        assert response.status_code == 400, raw
        error = response.json()["error"]
        assert error["code"] == "INVALID_TIMESTAMP" and "timestamp" in error["message"]
    missing = requests.get(server.stream_url("no-such"), params={"timestamp": "5"}, headers=accept, timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "STREAM_NOT_FOUND"


def test_the_reference_server_has_no_time_lookups(reference: str) -> None:
    with Client(reference) as client:
        stream = client.stream(f"v1/stream/{unique('plain-times')}")
        stream.create("application/json")
        stream.append_many([b'{"n":1}'])
        with pytest.raises(TimeLookupUnavailable):
            stream.offset_at(0)


@pytest.mark.parametrize(
    "args",
    [("--flush-interval-ms", "50", "--tail-cache-bytes", "0"), ("--flush-interval-ms", "3600000")],
    ids=["from-delta-statistics", "from-the-memory-tail"],
)
def test_a_fork_answers_from_its_source_below_the_fork_point(
    server_factory: Callable[..., ServerProcess], args: tuple[str, ...]
) -> None:
    server = server_factory(*args)
    with Client(server.url) as client:
        source = client.stream(f"v1/stream/{unique('source')}")
        stamps = _append_groups(source, flushed=args[1] == "50")  # 15 messages, three times
        fork = client.stream(f"v1/stream/{unique('fork')}")
        fork.create("application/json", forked_from=source, fork_offset=offset_at(8))
        after(stamps[-1])
        fork.append_many([b'{"own":1}', b'{"own":2}'])
        own = append_times(fork)
        assert len(own) == 10 and own[8] > stamps[-1]
        assert fork.offset_at(0).offset == offset_at(0)  # the source's messages, below the fork point
        assert fork.offset_at(stamps[PER_GROUP]).offset == offset_at(PER_GROUP)
        # The source's messages after the fork point are not the fork's: its own come next.
        assert fork.offset_at(stamps[2 * PER_GROUP]).offset == offset_at(8)
        assert fork.offset_at(own[8]).offset == offset_at(8)
        assert fork.offset_at(own[9] + 1).offset is None
        assert fork.offset_at(own[9] + 1).next_offset == offset_at(10)
