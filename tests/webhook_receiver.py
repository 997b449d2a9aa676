"""A real webhook receiver on 127.0.0.1 for the subscription tests, and JWKS verification.

The receiver is ``http.server`` in a thread: it records every request whose body arrived whole
(arrival time, raw body, ``Webhook-Signature``) and answers with the status and JSON body the test sets,
so a test can make it fail N times, then succeed, or answer ``{"done": true}``.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from servers import wait_for


@dataclass
class Received:
    at: float
    raw: bytes
    signature: str | None

    @property
    def body(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.raw)
        return data


@dataclass
class WebhookReceiver:
    status: int = 200
    answer: dict[str, Any] = field(default_factory=dict)
    fail_first: int = 0
    """Answer 500 to this many requests before answering ``status``."""
    received: list[Received] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, port: int = 0) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                if len(raw) < length:
                    # The sender died mid-request (a test's kill -9): nothing was delivered, as a
                    # real receiver would see it; recording it would hand a test half a body.
                    self.close_connection = True
                    return
                with receiver._lock:
                    receiver.received.append(Received(time.monotonic(), raw, self.headers.get("Webhook-Signature")))
                    failing = len(receiver.received) <= receiver.fail_first
                status = 500 if failing else receiver.status
                payload = json.dumps({} if failing else receiver.answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def wait(self, count: int, timeout_s: float = 10.0) -> list[Received]:
        def arrived() -> bool:
            with self._lock:
                return len(self.received) >= count

        wait_for(
            arrived,
            timeout_s,
            interval_s=0.02,
            message=lambda: f"({len(self.received)} webhook requests arrived, expected {count})",
        )
        with self._lock:
            return list(self.received)


def verify_signature(raw: bytes, header: str, jwks: dict[str, Any], max_age_s: int = 300) -> bool:
    """What a receiver does (§7.1, §12.10): pick the key by ``kid``, check age and signature."""
    fields = dict(part.split("=", 1) for part in header.split(","))
    keys = [key for key in jwks["keys"] if key["kid"] == fields["kid"]]
    if len(keys) != 1 or abs(time.time() - int(fields["t"])) > max_age_s:
        return False
    x = base64.urlsafe_b64decode(keys[0]["x"] + "==")
    signature = base64.urlsafe_b64decode(fields["ed25519"] + "==")
    try:
        Ed25519PublicKey.from_public_bytes(x).verify(signature, fields["t"].encode() + b"." + raw)
    except InvalidSignature:
        return False
    return True
