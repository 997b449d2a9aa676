"""A stream's answer as the handlers make it: a status, the protocol's headers and a body (``Answer``).

The ASGI app answers with Starlette's ``Response``: its headers pairs of lower-cased latin-1 bytes,
``content-length`` added last, and the body sent in ASGI messages. The fast path writes a
response's head itself (``fastpath/cycle.py``), and for the answers it serves most (a read's data,
a create's or an append's headers, a ``HEAD``) making that ``Response`` only to read its header
pairs back cost more than the rest of the rendering. So the stream handlers answer with an
``Answer``: the fast path renders its head from the headers as they are (``head_lines``), the
app's path makes it the ``Response`` it always was (``response``). Both come to the same bytes
(tests/server/test_write_answers.py, tests/server/test_lean_appends.py).

An answer's headers are the stream protocol's own: never one of the security headers the request
policy adds to every response, never ``Connection`` (the fast path writes its lines as they are).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from starlette.responses import Response

from .responses import PartsResponse

Body = bytes | Sequence[bytes | memoryview]
"""A body in one buffer, or in parts written end to end (``PartsResponse``)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A status, the protocol's headers (see the module docstring) and a body: ``bytes``, or parts
    written end to end (a ``200``'s: a binary read's buffers, none copied into one)."""

    status_code: int
    headers: dict[str, str]
    body: Body = b""

    def response(self) -> Response:
        """The ``Response`` the app's path answers with."""
        if isinstance(self.body, bytes):
            return Response(self.body, status_code=self.status_code, headers=self.headers)
        assert self.status_code == 200, self.status_code  # (``PartsResponse`` is a 200)
        return PartsResponse(self.body, self.headers)

    def length_line(self) -> bytes:
        """The ``content-length`` line that ``response`` adds after the headers, if any (none for
        ``1xx``, ``204`` and ``304``, as Starlette renders them)."""
        if self.status_code < 200 or self.status_code in (204, 304):
            return b""
        body = self.body
        size = len(body) if isinstance(body, bytes) else sum(len(part) for part in body)
        return b"content-length: %d\r\n" % size
