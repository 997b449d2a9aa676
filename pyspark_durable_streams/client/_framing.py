"""Incremental parsers that cut a streamed body into messages without buffering it whole.

Two framings carry message boundaries over plain HTTP bodies:

* RFC 2046 ``multipart/mixed`` (our server's boundaries extension and ``/bootstrap``): one
  part per message, with per-part headers.
* A JSON array (every server's ``application/json`` reads): one element per message.

Both parsers consume an iterator of byte chunks and hold at most one message plus one
chunk in memory, which is what keeps tailing a 200 MB stream cheap.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_BOUNDARY_RE = re.compile(r"""boundary=(?:"([^"]+)"|([^;\s]+))""", re.IGNORECASE)
# Outside strings only these bytes change the JSON array parser's state.
_JSON_STRUCTURE_RE = re.compile(rb'["\[\]{},]')
_JSON_STRING_END_RE = re.compile(rb'["\\]')


@dataclass(frozen=True)
class Part:
    """One MIME part: lower-cased header names, and the exact body bytes."""

    headers: dict[str, str]
    body: bytes


def multipart_boundary(content_type: str) -> str | None:
    """The boundary of a ``multipart/*`` content type, or None for anything else."""
    if not content_type.strip().lower().startswith("multipart/"):
        return None
    match = _BOUNDARY_RE.search(content_type)
    if match is None:
        return None
    return match.group(1) or match.group(2)


def iter_parts(chunks: Iterable[bytes], boundary: str) -> Iterator[Part]:
    """Parts of a multipart body, each yielded as soon as its closing delimiter arrives.

    Raises ValueError on a body that ends before the close delimiter: a truncated
    response must not pass for a complete one.
    """
    delimiter = b"\r\n--" + boundary.encode("latin-1")
    buffer = bytearray(b"\r\n")  # lets a delimiter at the very start match like every other one
    scan_from = 0
    in_preamble = True
    for chunk in chunks:
        buffer += chunk
        while True:
            at = buffer.find(delimiter, scan_from)
            if at < 0:
                # Keep a tail long enough to hold a delimiter split across chunks.
                scan_from = max(0, len(buffer) - len(delimiter))
                break
            after = at + len(delimiter)
            closing = buffer[after : after + 2] == b"--"
            line_end = buffer.find(b"\n", after)
            if len(buffer) < after + 2 or (not closing and line_end < 0):
                scan_from = at  # the delimiter line is not complete yet
                break
            if not in_preamble:
                yield _parse_part(buffer, at)
            if closing:
                return
            in_preamble = False
            del buffer[: line_end + 1]
            scan_from = 0
    raise ValueError("multipart body ended before its closing boundary")


def _parse_part(buffer: bytearray, end: int) -> Part:
    """The part in ``buffer[:end]``: headers, a blank line, then the body (copied exactly once)."""
    if buffer.startswith(b"\r\n"):
        head_end = body_start = 2
    else:
        head_end = buffer.find(b"\r\n\r\n", 0, end)
        head_end, body_start = (end, end) if head_end < 0 else (head_end, head_end + 4)
    headers: dict[str, str] = {}
    for line in buffer[:head_end].decode("latin-1").split("\r\n"):
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    with memoryview(buffer) as view:
        body = bytes(view[body_start:end])
    return Part(headers, body)


def iter_json_array(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The exact bytes of each top-level element of a JSON array, whitespace trimmed.

    Only structure is tracked (depth, strings, escapes); elements are not validated here,
    ``json.loads`` does that when a caller asks for a value.
    """
    buffer = bytearray()
    pos = 0  # next byte to scan
    depth = 0  # 0 = before the outer '[', 1 = between top-level elements
    in_string = False
    start: int | None = None  # where the current top-level element begins
    for chunk in chunks:
        buffer += chunk
        while True:
            if in_string:
                match = _JSON_STRING_END_RE.search(buffer, pos)
                if match is None or (match.group() == b"\\" and match.end() >= len(buffer)):
                    pos = len(buffer) if match is None else match.start()
                    break
                pos = match.end() + (1 if match.group() == b"\\" else 0)
                in_string = match.group() == b"\\"
                continue
            match = _JSON_STRUCTURE_RE.search(buffer, pos)
            if match is None:
                pos = len(buffer)
                break
            char, pos = match.group(), match.end()
            if char == b'"':
                in_string = True
            elif char in b"[{":
                depth += 1
                if depth == 1:
                    start = pos
            elif depth == 1 and char in b",]":
                assert start is not None
                element = bytes(buffer[start : match.start()]).strip()
                if element or char == b",":
                    yield element
                if char == b"]":
                    return
                start = pos
            elif char in b"]}":
                depth -= 1
        cut = start if start is not None else pos
        del buffer[:cut]
        pos -= cut
        if start is not None:
            start = 0
    raise ValueError("JSON array body ended before its closing ']'")
