"""A request's query parameters and headers, read from its ASGI scope as Starlette reads them,
without Starlette's objects.

A stream's read asks for a few query parameters and one or two headers. Through Starlette,
that is a ``QueryParams`` (``parse_qsl``, then a multi-dict built twice over) and a ``Headers``
whose every ``get`` lower-cases and encodes its key again: ~4.7 µs a read outside the server,
7 µs of the event loop's ~46 in it (a read of one small message; bench/README.md, "HTTP
floor"). Here a query string with no ``%`` or ``+`` is split on ``&`` and ``=`` -- ``parse_qsl``
does exactly that to such a string (blank values kept, as Starlette keeps them) -- and any
other goes through ``parse_qsl`` itself; a header is the first of its name, looked up by a
lower-case name given as bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qsl

from starlette.types import Scope


class Query:
    """A request's query parameters: ``get`` answers the last value of a name (as Starlette's
    ``QueryParams.get``), ``getlist`` all of them in order."""

    __slots__ = ("_values",)

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        self._values: dict[str, list[str]] = {}
        for name, value in pairs:
            self._values.setdefault(name, []).append(value)

    def get(self, name: str) -> str | None:
        values = self._values.get(name)
        return values[-1] if values else None

    def getlist(self, name: str) -> list[str]:
        return list(self._values.get(name, ()))


def query(scope: Scope) -> Query:
    """The query parameters of the request ``scope`` (``QueryParams(scope["query_string"])``'s)."""
    raw: bytes = scope.get("query_string", b"")
    text = raw.decode("latin-1")
    if b"%" in raw or b"+" in raw:  # (escapes and spaces: decoded by parse_qsl)
        return Query(parse_qsl(text, keep_blank_values=True))
    return Query(field.partition("=")[::2] for field in text.split("&") if field)


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of the header ``name`` (lower-case) in the request ``scope``, as
    Starlette's ``Headers.get`` answers it."""
    for key, value in scope["headers"]:
        if key == name:
            found: str = value.decode("latin-1")
            return found
    return None
