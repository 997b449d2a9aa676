"""A write's answer on the fast path (``route.WriteAnswer``) is written as the bytes of the ``Response``
the app would make of it (``FastCycle._write_answer`` against ``FastCycle._write``).

The cycle writes to a transport that keeps what it is given (no socket: the rendering alone is under
test here; tests/server/test_lean_appends.py compares whole answers of two real servers).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from uvicorn.protocols.http.flow_control import FlowControl

from durable_streams_server.http.fastpath.cycle import DefaultLines, FastCycle
from durable_streams_server.http.fastpath.route import FastPath, WriteAnswer

DEFAULTS = [(b"date", b"Tue, 01 Dec 2026 00:00:00 GMT"), (b"server", b"uvicorn")]


class _Kept:
    """A transport that keeps what is written to it."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, parts: list[bytes]) -> None:
        self.written += b"".join(parts)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def _written(write: str, answer: WriteAnswer, defaults: list[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
    """What a fresh cycle writes for ``answer`` the ``write`` way, and whether it closed the connection."""
    transport = _Kept()
    cycle = FastCycle(
        {"method": "PUT", "path": "/v1/stream/s"},
        "v1/stream/s",
        cast(FastPath, None),  # (not asked by the writes)
        False,
        cast(asyncio.Transport, transport),
        FlowControl(cast(asyncio.Transport, transport)),
        defaults,
        DefaultLines(),
        keep_alive=True,
        access_log=False,
        on_response=lambda: None,
    )
    if write == "answer":
        cycle._write_answer(answer)
    else:
        cycle._write(answer.response())
    return transport.written, transport.closed


ANSWERS = [
    WriteAnswer(201, {"Content-Type": "text/plain", "Stream-Next-Offset": "0_0", "Location": "http://h/v1/stream/s"}),
    WriteAnswer(200, {"Content-Type": "application/json; charset=utf-8", "Stream-Next-Offset": "0_7"}),
    WriteAnswer(201, {"Content-Type": "text/plain", "Stream-Next-Offset": "0_1", "Stream-Closed": "true"}),
    WriteAnswer(204, {"Stream-Next-Offset": "0_12"}),
    WriteAnswer(200, {"Stream-Next-Offset": "0_3", "Producer-Epoch": "2", "Producer-Seq": "9"}),
    WriteAnswer(204, {"Stream-Next-Offset": "0_4", "ETag": '"0_4"'}),
    WriteAnswer(204, {}),
    WriteAnswer(304, {"ETag": '"0_4"'}),  # (no write answers so; Starlette's rule, whole)
]


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda answer: f"{answer.status_code}-{len(answer.headers)}")
@pytest.mark.parametrize(
    "defaults",
    [DEFAULTS, [], [*DEFAULTS, (b"connection", b"close")], [(b"x-bad", b"a\x01b")]],
    ids=["defaults", "none", "connection-close", "unsafe-default"],
)
def test_a_write_answer_is_the_bytes_of_its_response(answer: WriteAnswer, defaults: list[Any]) -> None:
    if defaults and defaults[0][0] == b"x-bad":  # (uvicorn refuses the value: both raise, nothing written)
        for write in ("answer", "response"):
            with pytest.raises(RuntimeError, match="Invalid HTTP header value"):
                _written(write, answer, defaults)
        return
    written, closed = _written("answer", answer, defaults)
    assert (written, closed) == _written("response", answer, defaults)
    assert written.startswith(b"HTTP/1.1 %d " % answer.status_code)
    assert (b"content-length: 0\r\n" in written) == (answer.status_code not in (204, 304))


def test_a_value_no_head_may_carry_is_refused_as_the_response_refuses_it() -> None:
    answer = WriteAnswer(201, {"Content-Type": "text/plain", "Location": "http://h/a\r\nx-injected: 1"})
    for write in ("answer", "response"):
        with pytest.raises(RuntimeError, match="Invalid HTTP header value"):
            _written(write, answer, DEFAULTS)
