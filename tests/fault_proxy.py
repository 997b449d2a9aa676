"""A loopback HTTP proxy in front of our real server that injects faults, request by request.

``FaultProxy(target_port)`` listens on 127.0.0.1 (an asyncio loop on a thread of its own)
and forwards each request to the server over a fresh connection (``Connection: close`` on
both sides: one request per connection, so a fault hits exactly one request). Faults are
scripted per request: ``proxy.inject(method, *faults)`` queues faults for the next requests
with that method (``"*"``: any); a request with no fault queued passes through. A fault:

* ``Fault.status(500)`` / ``Fault.status(503, retry_after=1)``: answered by the proxy; the
  server never sees the request;
* ``DROP_REQUEST``: the connection is closed once the request arrived, nothing is
  forwarded (the server never sees it);
* ``DROP_ANSWER``: forwarded (the server processes it), then the connection is closed
  without an answer;
* ``CUT_BODY``: forwarded, and the answer is cut in the middle of its body.

``log`` records ``(method, target, fault)`` of every request seen, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass

from servers import free_port


@dataclass(frozen=True)
class Fault:
    kind: str
    status_code: int = 0
    retry_after: int | None = None

    @classmethod
    def status(cls, code: int, retry_after: int | None = None) -> Fault:
        return cls("status", code, retry_after)


DROP_REQUEST = Fault("drop-request")
DROP_ANSWER = Fault("drop-answer")
CUT_BODY = Fault("cut-body")
PASS = Fault("pass")


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.log: list[tuple[str, str, str]] = []
        self._faults: dict[str, list[Fault]] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        start = asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        async def stop() -> None:
            """Stop listening, and end the requests still in flight here: a task left pending in a
            loop that is then closed is destroyed later, in whatever test runs then."""
            assert self._server is not None
            self._server.close()
            serving = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in serving:
                task.cancel()
            await asyncio.gather(*serving, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def inject(self, method: str, *faults: Fault) -> None:
        with self._lock:
            self._faults.setdefault(method.upper(), []).extend(faults)

    def pending(self) -> int:
        with self._lock:
            return sum(len(queue) for queue in self._faults.values())

    def faults_seen(self) -> list[str]:
        return [fault for _, _, fault in self.log if fault != PASS.kind]

    def _next_fault(self, method: str) -> Fault:
        with self._lock:
            for key in (method, "*"):
                queue = self._faults.get(key)
                if queue:
                    return queue.pop(0)
        return PASS

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = [line for line in lines[1:] if line and not line.lower().startswith("connection:")]
            length = next((int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:")), 0)
            body = await reader.readexactly(length)
            fault = self._next_fault(method)
            self.log.append((method, target, fault.kind))
            if fault.kind == "status":
                writer.write(_answer(fault))
            elif fault.kind != "drop-request":
                request = "\r\n".join([lines[0], *headers, "Connection: close", "", ""]).encode("latin-1") + body
                answer = await _forward(self.target_port, request)
                if fault.kind == "cut-body":
                    split = answer.index(b"\r\n\r\n") + 4
                    answer = answer[: split + max(1, (len(answer) - split) // 2)]
                if fault.kind != "drop-answer":
                    writer.write(answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            with contextlib.suppress(ConnectionError):
                writer.close()


async def _forward(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await reader.read(-1)
    finally:
        writer.close()


def _answer(fault: Fault) -> bytes:
    body = b'{"error": {"code": "INJECTED", "message": "injected by the fault proxy"}}'
    lines = [
        f"HTTP/1.1 {fault.status_code} Injected",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if fault.retry_after is not None:
        lines.append(f"Retry-After: {fault.retry_after}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
