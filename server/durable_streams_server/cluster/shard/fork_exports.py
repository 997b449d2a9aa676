"""The cluster-internal route a source's shard answers for forks in other shards.

``/v1/cluster/fork-links/<source path>`` (``fork_copies`` sends these, through a node's
router, which relays them to the source's shard):

* ``POST``: validate a fork of the source as a local fork is validated, register its link
  (``Durable-Streams-Fork-Link``, idempotent) and answer the export
  (``protocol.fork_export``), streamed a slice at a time; the fork's path comes in
  ``Durable-Streams-Fork``, its fork offset, sub-offset and content type in the protocol's
  own headers. Refusals are the protocol's (404 ``STREAM_NOT_FOUND``, 409
  ``STREAM_DELETED`` / ``CONTENT_TYPE_MISMATCH``, 400 ``INVALID_OFFSET`` /
  ``INVALID_FORK_SUB_OFFSET``, 410 ``OFFSET_GONE``).
* ``DELETE ?link=<id>``: remove the link (204, also when it is already gone).

Authority: only the cluster's own servers may call these. A cluster node makes one random
secret per storage root (``cluster.node.secret``) and gives it to its shard servers; every
request here must carry it (``credential.require``, compared in constant time),
whether or not bearer tokens are configured, and client tokens count for nothing here
(``http.policy``): a client's fork of another shard's stream is authorized at the fork's shard,
where creating a fork needs read on its source. A server that is no cluster shard
server has no secret and answers 404.
"""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ...engine import fork_exports
from ...engine.engine import Engine
from ...engine.types import CreateRequest
from ...protocol import fork_export
from ...protocol import headers as h
from ...protocol.errors import BadRequest, MethodNotAllowed
from ...protocol.offsets import parse_offset
from .credential import require
from .fork_copies import FORK_HEADER, LINK_HEADER
from .guard import ShardGuard


async def answer(engine: Engine, guard: ShardGuard, request: Request) -> Response:
    require(guard.secret, request.url.path, request.scope["headers"])
    source = request.path_params["path"]
    if request.method == "DELETE":
        link = request.query_params.get("link")
        if not link:
            raise BadRequest("an unlink needs ?link=", code="INVALID_FORK_LINK")
        await fork_exports.unlink(engine, link)
        return Response(status_code=204)
    if request.method != "POST":
        raise MethodNotAllowed(f"{request.method} is not supported on {request.url.path}")
    headers = request.headers
    link, fork = headers.get(LINK_HEADER), headers.get(FORK_HEADER)
    if not link or not fork:
        raise BadRequest(f"an export needs {LINK_HEADER} and {FORK_HEADER}", code="INVALID_FORK_LINK")
    offset_raw, sub_raw = headers.get(h.STREAM_FORK_OFFSET), headers.get(h.STREAM_FORK_SUB_OFFSET)
    if sub_raw is not None and not (sub_raw.isascii() and sub_raw.isdigit()):
        raise BadRequest(f"invalid Stream-Fork-Sub-Offset {sub_raw!r}", code="INVALID_FORK_SUB_OFFSET")
    wanted = CreateRequest(
        name=unquote(fork),
        content_type=h.parse_content_type(headers.get("content-type")),
        ttl_s=None,
        expires_at=None,
        expires_at_ms=None,
        closed=False,
        body=b"",
        fork_from=source,
        fork_offset=parse_offset(offset_raw) if offset_raw is not None else None,
        fork_sub_offset=int(sub_raw) if sub_raw is not None else None,
    )
    export = await fork_exports.register(engine, wanted, link)
    return StreamingResponse(fork_exports.body(engine, export), media_type=fork_export.CONTENT_TYPE)
