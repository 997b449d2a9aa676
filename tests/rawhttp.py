"""HTTP/1.1 over a bare socket, for requests no HTTP client library would send.

``requests`` re-quotes paths and refuses odd header values; hostile-input tests need the
exact bytes on the wire. Responses are parsed by h11 (the same parser uvicorn uses, in
its client role), so a malformed response from the server fails the test too.
"""

from __future__ import annotations

import contextlib
import json
import socket
from dataclasses import dataclass

import h11


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    """Lower-case names; repeated headers joined with ', '."""
    body: bytes

    def json_error(self) -> dict[str, str]:
        """The ``{"error": {"code", "message"}}`` body every refusal of the app carries."""
        media_type = self.headers.get("content-type", "").split(";")[0].strip()
        assert media_type == "application/json", (self.status, self.headers, self.body[:300])
        payload = json.loads(self.body)
        assert isinstance(payload, dict) and set(payload) == {"error"}, payload
        error = payload["error"]
        assert isinstance(error, dict) and set(error) == {"code", "message"}, payload
        assert all(isinstance(value, str) and value for value in error.values()), payload
        return error


def request_bytes(
    method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes | None, *, chunked: bool = False
) -> bytes:
    """A request head (+ body) exactly as given, closing the connection after the answer."""
    lines = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1"]
    lines += [name + b": " + value for name, value in headers]
    if body is not None and chunked:
        lines.append(b"Transfer-Encoding: chunked")
        body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    elif body is not None:
        lines.append(b"Content-Length: %d" % len(body))
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def text_post_head(path: bytes, length: int, *extra: bytes) -> bytes:
    """The head of a keep-alive ``POST`` of ``length`` bytes of ``text/plain`` (the body is sent
    after it, with it or later), plus ``extra`` header lines."""
    lines = [b"POST " + path + b" HTTP/1.1", b"Host: x", b"Content-Type: text/plain", b"Content-Length: %d" % length]
    return b"\r\n".join([*lines, *extra]) + b"\r\n\r\n"


def exchange(port: int, data: bytes, method: str = "GET", timeout_s: float = 30.0) -> RawResponse:
    """Send ``data`` and read one response (``method`` tells h11 whether a body follows)."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "127.0.0.1")]))
    conn.send(h11.EndOfMessage())
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        with contextlib.suppress(OSError):  # the server may answer (and close) before reading it all
            sock.sendall(data)
        status, headers, body = 0, {}, bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(sock.recv(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                for name, value in event.headers:
                    key, text = name.decode().lower(), value.decode("latin-1")
                    headers[key] = f"{headers[key]}, {text}" if key in headers else text
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return RawResponse(status, headers, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError(f"the server closed the connection without a response to {data[:200]!r}")


def connection_closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """Whether the server closes ``sock`` (reading and discarding anything it sends)."""
    sock.settimeout(within_s)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True
