"""How a server frames the messages of a read, learned by asking once.

``arrow`` and ``multipart`` are our server's read extensions (README "Arrow reads",
"Message boundaries on ordinary reads"): every message arrives with its own offset, so a
range can be counted, split and cut exactly. ``plain`` is the base protocol: a response
carries many messages and only its end offset (``Stream.read`` yields JSON items or byte
chunks there).

The probe is one read at ``offset`` offering both extensions (Arrow preferred); the answer's
content type says which one the server speaks. Probing at the stream's tail makes it cheap:
the answer carries no messages. Its body is never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from ._http import HTTP, USE_DEFAULT, Timeout, UseDefault
from .models import ARROW_STREAM, media_type

ReadFraming = Literal["arrow", "multipart", "plain"]
MULTIPART = "multipart/mixed"
PROBE_ACCEPT = f"{ARROW_STREAM}, {MULTIPART};q=0.5"
_FRAMINGS: dict[str, ReadFraming] = {ARROW_STREAM: "arrow", MULTIPART: "multipart"}


def probe_framing(
    http: HTTP,
    url: str,
    offset: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: Timeout | UseDefault = USE_DEFAULT,
) -> ReadFraming:
    """The framing the server answers a read of ``url`` at ``offset`` with."""
    response = http.request(
        "GET",
        url,
        ok=(200, 204),
        params={"offset": offset},
        headers={**(headers or {}), "Accept": PROBE_ACCEPT},
        timeout=timeout,
        stream=True,
    )
    with response:
        return _FRAMINGS.get(media_type(response.headers.get("Content-Type")), "plain")
