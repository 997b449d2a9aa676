"""Per-server HTTP limits, chosen by the operator (see ``config.ServerConfig``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_body_bytes: int
    max_read_bytes: int
    long_poll_timeout_s: float
    sse_reconnect_s: float
