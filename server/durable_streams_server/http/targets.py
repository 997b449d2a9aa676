"""Which stream a URL path names: a base-surface path split into a stream and a sub-resource,
and the stream a ``Stream-Forked-From`` reference names.

The handlers and the authorization check both need these answers, and they must agree: a
token limited to a path prefix is checked against the stream the router will serve, not
against the raw URL (``.../x/snapshot/5`` belongs to stream ``.../x``), and a fork is checked
against the source the create will read.
"""

from __future__ import annotations

import contextlib
from urllib.parse import urlsplit

from ..protocol.ids import BASE_SURFACE_PREFIX


def base_target(name: str) -> tuple[str, str | None, str | None]:
    """``(stream, sub_resource, snapshot_offset)`` for ``name`` = ``v1/stream/...``.

    Stream paths may contain '/', so paths ending in ``/bootstrap``, ``/snapshot`` or
    ``/snapshot/{offset}`` are reserved for those sub-resources of the stream before
    them (and cannot name streams).
    """
    prefix, _, last = name.rpartition("/")
    if last in ("bootstrap", "snapshot") and prefix.startswith(BASE_SURFACE_PREFIX):
        return prefix, last, None
    prefix, _, offset = name.rpartition("/snapshot/")
    if prefix.startswith(BASE_SURFACE_PREFIX) and offset and "/" not in offset:
        return prefix, "snapshot", offset
    return name, None, None


def stream_name_from_reference(reference: str) -> str:
    """``Stream-Forked-From`` names a stream by URL path (or full URL)."""
    path = reference
    if "://" in reference:
        # An unparsable URL ("http://[") names no stream (404); the authorization check calls
        # this too, outside any error mapping, so it must not raise.
        with contextlib.suppress(ValueError):
            path = urlsplit(reference).path
    return path.strip("/")
