"""How a base-surface URL path splits into a stream and a sub-resource.

The router and the authorization check both need this answer, and they must agree: a
token limited to a path prefix is checked against the stream the router will serve, not
against the raw URL (``.../x/snapshot/5`` belongs to stream ``.../x``).
"""

from __future__ import annotations

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
