"""Retention policies (our server's extension): how much of a stream the server keeps.

A policy has up to three limits (``Retention``): messages appended longer ago than
``max_age_seconds``, older than the newest ``max_bytes`` bytes or than the newest
``max_messages`` messages are removed by the server's maintenance passes; reads below the
stream's earliest retained offset then answer ``410 Gone`` (``errors.Gone.earliest_offset``).
A limit of ``NO_LIMIT`` names "no limit" (on a create it overrides the server's or the bucket's
default; on a change it removes the limit); ``None`` leaves it unnamed.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._http import HTTP, USE_DEFAULT, Timeout, UseDefault, header
from .models import NO_LIMIT, Retention

__all__ = ["NO_LIMIT", "Retention", "RetentionPolicy"]


class RetentionPolicy:
    """The retention policy of one stream: ``PATCH {stream}`` with the limits to change."""

    def __init__(self, transport: HTTP, stream_url: str) -> None:
        self._transport = transport
        self._url = stream_url

    def change(
        self,
        retention: Retention,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout | UseDefault = USE_DEFAULT,
    ) -> Retention | None:
        """Set the limits ``retention`` names (``NO_LIMIT`` removes one; ``None`` leaves it as it is).
        Returns the stream's limits after the change."""
        named = retention.headers()
        if not named:
            raise ValueError("name at least one limit to change (NO_LIMIT removes one)")
        merged = {**named, **(headers or {})}
        response = self._transport.request("PATCH", self._url, ok=(200, 204), headers=merged, timeout=timeout)
        return Retention.from_headers(lambda name: header(response, name))
