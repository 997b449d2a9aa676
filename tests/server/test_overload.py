"""Writers faster than Delta commits: the server pushes back instead of growing (issue 41, path 10).

A real server with a 128 MiB ``--memory-budget`` takes 256 MiB of 1 MiB binary appends from 4
clients posting as fast as they go (``bench/overload_memory.py``'s burst, smaller). Its peak RSS
(VmHWM: nothing between samples is missed) stays within 1.5x the budget above its RSS at idle,
and comes back under the budget above idle once the burst is over; every acknowledged append is
read back once, in order, with its bytes; a client that was pushed back got a 503 or 429 with
``Retry-After``, never an error or a closed connection. Before the write admission
(``engine.memory_writes``) the peak was ~900 MiB above idle here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import json
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from servers import ServerProcess, wait_for

from durable_streams_server.engine.memory_writes import WriteAdmission
from durable_streams_server.protocol.errors import ServiceUnavailable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import overload_memory

MIB = 1024 * 1024
BUDGET = 128 * MIB
CLIENTS = 4
APPENDS = 64  # per client: 256 MiB in all
SETTLE_S = 20.0


def _idle_rss(sampler: overload_memory.RssSampler) -> int:
    """The RSS once it has stopped moving (start-up's last allocations come after ready)."""
    last = sampler.rss()
    for _ in range(20):
        time.sleep(0.25)  # (still is measured over time: two samples a quarter second apart)
        now = sampler.rss()
        if abs(now - last) < MIB:
            return now
        last = now
    return last


@pytest.mark.serial
def test_a_burst_of_large_appends_is_pushed_back_within_the_budget(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory("--memory-budget", str(BUDGET))
    assert server.proc is not None
    paths = [f"/v1/stream/overload-{index}" for index in range(CLIENTS)]
    for path in paths:
        assert requests.put(server.url + path, headers=overload_memory.OCTETS, timeout=30).status_code == 201
    sampler = overload_memory.RssSampler(server.proc.pid)
    idle = _idle_rss(sampler)
    with sampler:
        burst = overload_memory.burst(server.port, paths, APPENDS, MIB, timeout_s=300)
        peak = sampler.hwm()
        with contextlib.suppress(AssertionError):  # (the assertion on ``after`` below says it)
            wait_for(lambda: sampler.rss() <= idle + BUDGET, timeout_s=SETTLE_S, interval_s=0.1)
        after = sampler.rss()

    assert not burst.errors, burst.errors[:3]
    assert not burst.bad_refusals, "a refusal came without Retry-After"
    assert burst.appends == CLIENTS * APPENDS
    assert peak <= idle + 1.5 * BUDGET, (
        f"peak RSS {peak / MIB:,.0f} MiB, idle {idle / MIB:,.0f} MiB: over 1.5x the {BUDGET // MIB} MiB budget "
        f"({dict(burst.refusals)} refusals)"
    )
    assert after <= idle + BUDGET, f"RSS {after / MIB:,.0f} MiB {SETTLE_S:g} s after the burst (idle {idle / MIB:,.0f})"

    assert _metric(server, "durable_streams_writes_receiving_bytes") == 0
    for client, path in enumerate(paths):
        messages = overload_memory.read_back(server.port, path, MIB)
        acks = burst.acks[client]
        assert len(messages) == len(acks) == APPENDS
        for index, (message, ack) in enumerate(zip(messages, acks, strict=True)):
            assert overload_memory.ID.unpack_from(message) == (client, index)
            assert hashlib.sha1(message).digest() == ack.digest
        assert [ack.next_offset for ack in acks] == sorted(ack.next_offset for ack in acks)


def test_admission_waits_in_order_and_refuses_after_its_wait() -> None:
    """Bodies wait, first in first out, while receiving + queued fill the limit; room comes from
    ended requests and from the flusher (polled); a body still waiting after ``wait_s`` gets 503
    ``OVERLOADED`` with a retry delay; a lone body larger than the limit passes."""

    async def scenario() -> list[str]:
        queued = [0]
        writes = WriteAdmission(100, lambda: queued[0], wait_s=0.3, poll_s=0.01)
        events: list[str] = []

        async def body(name: str, nbytes: int) -> None:
            try:
                await writes.admit(nbytes)
            except ServiceUnavailable as error:
                events.append(f"{name} refused {error.code} {error.retry_after_s}")
                return
            events.append(f"{name} in ({writes.receiving})")

        await body("huge", 500)  # alone: admitted whatever its size
        writes.release(500)
        queued[0] = 60  # records not yet in Delta
        await body("a", 40)
        waiting = [asyncio.create_task(body(name, 30)) for name in ("b", "c")]
        await asyncio.sleep(0.05)
        assert writes.waiting == 2 and events[-1] == "a in (40)"
        queued[0] = 30  # a flush: room for b only (40 + 30 + 30)
        await asyncio.sleep(0.05)
        writes.release(40)  # a's request ends: room for c
        await asyncio.gather(*waiting)
        assert writes.try_admit(20) is False  # b and c (60) + 30 queued: no room for 20
        late = asyncio.create_task(body("d", 50))
        await late
        assert writes.refused == 1 and writes.waiting == 0
        stalled = WriteAdmission(100, lambda: 90, stalled=lambda: True)  # (Delta commits failing)
        stalled.try_admit(5)
        try:
            await stalled.admit(10)
        except ServiceUnavailable as error:
            events.append(f"stalled: refused at once {error.code}")
        return events

    assert asyncio.run(scenario()) == [
        "huge in (500)",
        "a in (40)",
        "b in (70)",
        "c in (60)",
        "d refused OVERLOADED 1",
        "stalled: refused at once OVERLOADED",
    ]


def test_a_body_without_room_is_refused_with_retry_after_and_the_connection_stays_open(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """A 4 MiB budget admits 1 MiB of writes in flight: a client that declared 1 MiB and sends it
    slowly holds that room, so another 1 MiB body waits unread and, after the admission's wait,
    gets 503 ``OVERLOADED`` with ``Retry-After`` on a connection that stays usable: the same
    connection then appends once the room is back."""
    server = server_factory("--memory-budget", str(4 * MIB))
    path = "/v1/stream/overload"
    assert requests.put(server.url + path, headers=overload_memory.OCTETS, timeout=30).status_code == 201
    slow = socket.create_connection(("127.0.0.1", server.port))
    slow.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {MIB}\r\n\r\n".encode()
        + b"s" * 1024
    )
    wait_for(  # (admitted: its body is being read)
        lambda: _metric(server, "durable_streams_writes_receiving_bytes") == MIB,
        message=lambda: f"(receiving {_metric(server, 'durable_streams_writes_receiving_bytes'):,.0f} bytes)",
    )
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    started = time.monotonic()
    conn.request("POST", path, body=b"w" * MIB, headers=overload_memory.OCTETS)
    response = conn.getresponse()
    error = json.loads(response.read())["error"]
    assert response.status == 503 and response.getheader("Retry-After") == "1", (response.status, error)
    assert error["code"] == "OVERLOADED" and time.monotonic() - started >= 5
    slow.sendall(b"s" * (MIB - 1024))  # the slow body ends: its room comes back
    assert slow.recv(4096).startswith(b"HTTP/1.1 204")
    slow.close()
    conn.request("POST", path, body=b"w" * MIB, headers=overload_memory.OCTETS)
    response = conn.getresponse()
    response.read()
    assert response.status == 204
    conn.close()
    assert [len(message) for message in overload_memory.read_back(server.port, path, MIB)] == [MIB, MIB]
    session = requests.Session()
    for _ in range(50):  # small appends (the fast path's): admitted and released as the large ones
        assert session.post(server.url + path, data=b"x" * 1000, headers=overload_memory.OCTETS).status_code == 204
    assert _metric(server, "durable_streams_writes_receiving_bytes") == 0
    assert _metric(server, "durable_streams_writes_refused_total") == 1
    assert _metric(server, "durable_streams_writes_limit_bytes") == MIB


def _metric(server: ServerProcess, name: str) -> float:
    for line in requests.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"/metrics has no {name}")
