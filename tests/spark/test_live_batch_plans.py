"""A batch range with nothing in Delta yet (a live stream's micro-batch) is read over HTTP without
asking for a read plan: the stream's HEAD says where its messages not yet in Delta start
(``Stream-Flushed-Offset``). History below that point is still planned and read from the files."""

from __future__ import annotations

import json
from collections.abc import Callable

import requests
from direct_support import PLAN, offset_at
from servers import ServerProcess, session

from pyspark_durable_streams._source.direct_plans import DirectRange
from pyspark_durable_streams._source.driver_streams import DriverStreams
from pyspark_durable_streams._source.offsets import EARLIEST
from pyspark_durable_streams._source.task_reader import StreamRange
from pyspark_durable_streams.client._http import Request, Transport
from pyspark_durable_streams.options import parse_read_options

JSON = {"Content-Type": "application/json"}


class _Recording:
    """The real transport, noting which requests asked for a read plan."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.plans: list[str] = []

    def send(self, request: Request) -> requests.Response:
        if request.headers.get("Accept") == PLAN["Accept"]:
            self.plans.append(str((request.params or {}).get("offset")))
        return self.transport.send(request)

    def close(self) -> None:
        self.transport.close()


def _recorded_driver(url: str, **options: str) -> tuple[DriverStreams, _Recording]:
    """A driver reading ``url`` whose client's requests are recorded (and sent as ever)."""
    driver = DriverStreams(parse_read_options({"url": url, **options}))
    recording = _Recording(driver.client.transport.transport)
    driver.client.transport.transport = recording
    return driver, recording


def _append(url: str, first: int, count: int) -> None:
    body = json.dumps([{"i": i} for i in range(first, first + count)]).encode()
    assert session().post(url, headers=JSON, data=body).status_code == 204


def _flushed_offset(url: str) -> str:
    return str(session().head(url).headers["Stream-Flushed-Offset"])


def test_a_live_range_is_read_without_a_plan_and_history_with_one(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory("--flush-interval-ms", "3600000")  # (only a stop flushes)
    url = server.stream_url("live")
    assert session().put(url, headers=JSON).status_code == 201
    _append(url, 0, 10)
    assert _flushed_offset(url) == offset_at(0)  # (durable, readable, not in Delta yet)
    server.restart()  # a graceful stop flushes: messages 0-9 are in Delta
    assert _flushed_offset(url) == offset_at(10)
    _append(url, 10, 5)
    assert _flushed_offset(url) == offset_at(10)  # the plan's delta_end says the same
    assert session().get(url, params={"offset": EARLIEST}, headers=PLAN).json()["delta_end"] == offset_at(10)

    driver, recording = _recorded_driver(url)
    delta_only, recording_delta = _recorded_driver(url, historyReads="delta")
    try:
        tails = driver.tails()
        assert tails == {url: offset_at(15)} and driver.flushed == {url: offset_at(10)}

        live = driver.plan({url: offset_at(10)}, tails)
        assert recording.plans == []
        assert live == [StreamRange(url, url, offset_at(10), offset_at(15), "arrow")]

        history = driver.plan({url: EARLIEST}, tails)
        assert recording.plans == [EARLIEST]
        direct = [part for part in history if isinstance(part, DirectRange)]
        assert [(part.first, part.end) for part in direct] == [(0, 10)]
        assert history[len(direct) :] == [StreamRange(url, url, offset_at(10), offset_at(15), "arrow")]

        delta_only.plan({url: offset_at(10)}, delta_only.tails())
        assert recording_delta.plans == [offset_at(10)]  # (historyReads=delta asks the server every time)
    finally:
        driver.client.close()
        delta_only.client.close()
