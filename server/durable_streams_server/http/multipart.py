"""RFC 2046 ``multipart/mixed`` framing: one MIME part per message, byte-exact.

Used by ``/bootstrap`` and by ordinary reads that ask for message boundaries with
``Accept: multipart/mixed``. The boundary is 48 random hex characters, so the chance that
it occurs inside binary data (which would end a part early) is 2^-192 per position.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from ..protocol import headers as h
from ..protocol.offsets import Offset, encode_seq

MULTIPART_MIXED = "multipart/mixed"


def new_boundary() -> str:
    return "ds-" + secrets.token_hex(24)


def content_type(boundary: str) -> str:
    return f"{MULTIPART_MIXED}; boundary={boundary}"


def part(boundary: str, headers: Mapping[str, str], body: bytes) -> bytes:
    """One part; the CRLF before the next delimiter belongs to that delimiter (RFC 2046)."""
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"--{boundary}\r\n{head}\r\n".encode() + body + b"\r\n"


def closing(boundary: str) -> bytes:
    return f"--{boundary}--\r\n".encode()


def wants_multipart(accept: str | None) -> bool:
    return accept is not None and MULTIPART_MIXED in accept.lower()


def message_parts(boundary: str, content_type: str, start: Offset, chunks: list[bytes], stamps: list[int]) -> bytes:
    """One part per message, each naming its own offset and append time (ms)."""
    parts = []
    for index, (chunk, stamp) in enumerate(zip(chunks, stamps, strict=True)):
        offset = start.encode() if index == 0 else encode_seq(start.seq + index)
        headers = {"Content-Type": content_type, h.STREAM_OFFSET: offset, h.STREAM_TIMESTAMP: str(stamp)}
        parts.append(part(boundary, headers, chunk))
    return b"".join(parts)
