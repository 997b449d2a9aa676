"""A strict RFC 2046 ``multipart/mixed`` parser for the tests, and helpers built on it.

Written here rather than borrowed from ``email`` so that the tests check the framing byte
by byte: the boundary comes from the Content-Type header, the CRLF before each delimiter
belongs to the delimiter, a delimiter line may only be followed by transport padding and
CRLF (or ``--`` for the close delimiter), and anything malformed raises
``MultipartError`` instead of being repaired.
"""

from __future__ import annotations

import http.client
import re
from dataclasses import dataclass

import requests

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_PARAM_RE = re.compile(rf';\s*({_TOKEN})\s*=\s*(?:"((?:[^"\\]|\\.)*)"|({_TOKEN}))')
# RFC 2046 section 5.1.1: bchars, 1 to 70 characters, not ending in a space.
_BOUNDARY_RE = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")
_HEADER_NAME_RE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CRLF = b"\r\n"


class MultipartError(ValueError):
    """The body or its Content-Type is not a well-formed multipart entity."""


@dataclass(frozen=True)
class Part:
    headers: dict[str, str]
    """Header names lower-cased; each name at most once."""
    body: bytes

    @property
    def content_type(self) -> str | None:
        return self.headers.get("content-type")

    def header(self, name: str) -> str:
        return self.headers[name.lower()]


def boundary_of(content_type: str) -> str:
    """The boundary parameter of a ``multipart/mixed`` Content-Type value."""
    media_type, _, params = content_type.partition(";")
    if media_type.strip().lower() != "multipart/mixed":
        raise MultipartError(f"not multipart/mixed: {content_type!r}")
    found: dict[str, str] = {}
    rest = ";" + params
    position = 0
    while position < len(rest) and rest[position:].strip():
        match = _PARAM_RE.match(rest, position)
        if match is None:
            raise MultipartError(f"malformed parameters in {content_type!r}")
        name = match.group(1).lower()
        if name in found:
            raise MultipartError(f"parameter {name!r} repeated in {content_type!r}")
        quoted = match.group(2)
        found[name] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else match.group(3)
        position = match.end()
    boundary = found.get("boundary")
    if boundary is None or not _BOUNDARY_RE.fullmatch(boundary):
        raise MultipartError(f"missing or invalid boundary in {content_type!r}")
    return boundary


def _skip_padding_and_crlf(body: bytes, position: int) -> int:
    """After a delimiter: optional transport padding (spaces, tabs), then CRLF."""
    while position < len(body) and body[position] in b" \t":
        position += 1
    if body[position : position + 2] != _CRLF:
        raise MultipartError(f"delimiter line not terminated by CRLF at byte {position}")
    return position + 2


def _parse_headers(block: bytes) -> dict[str, str]:
    headers: dict[str, str] = {}
    if not block:
        return headers
    for line in block.split(_CRLF):
        if line[:1] in (b" ", b"\t"):
            raise MultipartError(f"folded header line {line!r}")
        name, colon, value = line.partition(b":")
        if not colon or not _HEADER_NAME_RE.fullmatch(name):
            raise MultipartError(f"malformed header line {line!r}")
        key = name.decode("ascii").lower()
        if key in headers:
            raise MultipartError(f"header {key!r} repeated in one part")
        headers[key] = value.strip(b" \t").decode("utf-8")
    return headers


def parse_multipart(content_type: str, body: bytes, *, allow_preamble: bool = False) -> list[Part]:
    """Every body part, in order, byte-exact.

    The entity must start with the first dash-boundary (no preamble) unless
    ``allow_preamble``; after the close delimiter only CRLF and an empty epilogue may
    follow.
    """
    boundary = boundary_of(content_type).encode("ascii")
    dash_boundary = b"--" + boundary
    delimiter = _CRLF + dash_boundary
    if body.startswith(dash_boundary):
        position = len(dash_boundary)
    else:
        found = body.find(delimiter)
        if found < 0:
            raise MultipartError("no boundary delimiter in the body")
        if not allow_preamble:
            raise MultipartError(f"unexpected preamble {body[:found][:80]!r}")
        position = found + len(delimiter)
    parts: list[Part] = []
    while True:
        if body[position : position + 2] == b"--":
            epilogue = body[position + 2 :]
            if epilogue not in (b"", _CRLF):
                raise MultipartError(f"unexpected epilogue {epilogue[:80]!r}")
            return parts
        position = _skip_padding_and_crlf(body, position)
        end = body.find(delimiter, position)
        if end < 0:
            raise MultipartError("body part not followed by a delimiter (missing close delimiter)")
        if end == position:
            block, content_start = b"", end  # no headers, empty body: the CRLF is the delimiter's
        elif body.startswith(_CRLF, position):
            block, content_start = b"", position + 2
        else:
            header_end = body.find(_CRLF + _CRLF, position, end)
            if header_end < 0:
                raise MultipartError("part headers not terminated by an empty line")
            block, content_start = body[position:header_end], header_end + 4
        parts.append(Part(_parse_headers(block), body[content_start:end]))
        position = end + len(delimiter)


@dataclass(frozen=True)
class Bootstrap:
    """A parsed ``/bootstrap`` response."""

    status: int
    content_type: str
    snapshot_offset: str
    next_offset: str
    up_to_date: str
    snapshot: Part
    updates: list[Part]

    @property
    def update_bodies(self) -> list[bytes]:
        return [part.body for part in self.updates]


def parse_bootstrap(response: requests.Response) -> Bootstrap:
    assert response.status_code == 200, (response.status_code, response.text)
    content_type = response.headers["Content-Type"]
    parts = parse_multipart(content_type, response.content)
    assert parts, "a bootstrap response always has a first (snapshot) part"
    return Bootstrap(
        status=response.status_code,
        content_type=content_type,
        snapshot_offset=response.headers["Stream-Snapshot-Offset"],
        next_offset=response.headers["Stream-Next-Offset"],
        up_to_date=response.headers["Stream-Up-To-Date"],
        snapshot=parts[0],
        updates=parts[1:],
    )


def get_bootstrap(http: requests.Session, stream_url: str) -> Bootstrap:
    return parse_bootstrap(http.get(f"{stream_url}/bootstrap", timeout=30))


def read_all_bytes(http: requests.Session, stream_url: str, offset: str) -> tuple[bytes, str]:
    """Catch-up reads from ``offset`` until up to date: the bytes and the final offset."""
    data = b""
    for _ in range(10_000):
        response = http.get(stream_url, params={"offset": offset}, timeout=30)
        assert response.status_code == 200, (response.status_code, response.text)
        data += response.content
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            return data, offset
    raise AssertionError("never up to date")


def read_all_parts(http: requests.Session, stream_url: str, offset: str) -> tuple[list[Part], str]:
    """Message-framed catch-up reads (``Accept: multipart/mixed``) from ``offset``."""
    parts: list[Part] = []
    for _ in range(10_000):
        response = http.get(stream_url, params={"offset": offset}, headers={"Accept": "multipart/mixed"}, timeout=30)
        assert response.status_code == 200, (response.status_code, response.text)
        parts += parse_multipart(response.headers["Content-Type"], response.content)
        offset = response.headers["Stream-Next-Offset"]
        if response.headers.get("Stream-Up-To-Date") == "true":
            return parts, offset
    raise AssertionError("never up to date")


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    """Header names lower-cased."""
    body: bytes


def raw_request(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> RawResponse:
    """A request whose path goes on the wire exactly as given: ``requests`` would resolve
    ``..`` segments and decode percent-encoded unreserved characters such as ``%5F``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return RawResponse(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()
