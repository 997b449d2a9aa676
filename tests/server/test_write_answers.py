"""A handler's ``answers.Answer`` is written on the fast path as the bytes of the ``Response`` the app
makes of it (``FastCycle._write_answer`` against ``FastCycle._write`` of ``Answer.response()``).

The cycle writes to a transport that keeps what it is given (no socket: the rendering alone is under
test here; tests/server/test_lean_appends.py compares whole answers of two real servers).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from uvicorn.protocols.http.flow_control import FlowControl

from durable_streams_server.http.answers import Answer
from durable_streams_server.http.fastpath.cycle import DefaultLines, FastCycle
from durable_streams_server.http.fastpath.route import FastPath

READ = {"Content-Type": "text/plain", "Stream-Incarnation": "7-1796086081852", "Cache-Control": "no-store"}
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


def _written(
    write: str, answer: Answer, defaults: list[tuple[bytes, bytes]], method: str = "GET"
) -> tuple[bytes, bool]:
    """What a fresh cycle writes for ``answer`` to a ``method`` request the ``write`` way, and whether it
    closed the connection."""
    transport = _Kept()
    cycle = FastCycle(
        {"method": method, "path": "/v1/stream/s"},
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
    Answer(201, {"Content-Type": "text/plain", "Stream-Next-Offset": "0_0", "Location": "http://h/v1/stream/s"}),
    Answer(200, {"Content-Type": "application/json; charset=utf-8", "Stream-Next-Offset": "0_7"}),
    Answer(201, {"Content-Type": "text/plain", "Stream-Next-Offset": "0_1", "Stream-Closed": "true"}),
    Answer(204, {"Stream-Next-Offset": "0_12"}),
    Answer(200, {"Stream-Next-Offset": "0_3", "Producer-Epoch": "2", "Producer-Seq": "9"}),
    Answer(204, {"Stream-Next-Offset": "0_4", "ETag": '"0_4"'}),
    Answer(204, {}),
    Answer(304, {"ETag": '"7:0_0:0_4"', "Cache-Control": "public, max-age=60"}),
    Answer(200, {**READ, "Stream-Next-Offset": "0_2", "ETag": '"7:-1:0_2"'}, b"hello"),
    Answer(200, {**READ, "Stream-Next-Offset": "0_2"}, [b"he", memoryview(b"llo, "), b"world"]),
    Answer(200, {**READ, "Stream-Next-Offset": "0_0"}, []),
    Answer(200, {**READ, "Content-Type": "application/json", "Stream-Up-To-Date": "true"}, b"[]"),
]


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda answer: f"{answer.status_code}-{len(answer.headers)}")
@pytest.mark.parametrize(
    "defaults",
    [DEFAULTS, [], [*DEFAULTS, (b"connection", b"close")], [(b"x-bad", b"a\x01b")]],
    ids=["defaults", "none", "connection-close", "unsafe-default"],
)
def test_a_write_answer_is_the_bytes_of_its_response(answer: Answer, defaults: list[Any]) -> None:
    if defaults and defaults[0][0] == b"x-bad":  # (uvicorn refuses the value: both raise, nothing written)
        for write in ("answer", "response"):
            with pytest.raises(RuntimeError, match="Invalid HTTP header value"):
                _written(write, answer, defaults)
        return
    for method in ("GET", "HEAD", "PUT"):
        written, closed = _written("answer", answer, defaults, method)
        assert (written, closed) == _written("response", answer, defaults, method)
        assert written.startswith(b"HTTP/1.1 %d " % answer.status_code)
        body = answer.body if isinstance(answer.body, bytes) else b"".join(answer.body)
        has_length = answer.status_code not in (204, 304)
        assert (b"content-length: %d\r\n" % len(body) in written) == has_length
        assert written.endswith(b"\r\n\r\n" + (b"" if method == "HEAD" else body))


def test_a_value_no_head_may_carry_is_refused_as_the_response_refuses_it() -> None:
    answer = Answer(201, {"Content-Type": "text/plain", "Location": "http://h/a\r\nx-injected: 1"})
    for write in ("answer", "response"):
        with pytest.raises(RuntimeError, match="Invalid HTTP header value"):
            _written(write, answer, DEFAULTS)
