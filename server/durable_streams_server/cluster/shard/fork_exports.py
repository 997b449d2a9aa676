"""A source's side of a copied fork: the cluster-internal route a source's shard answers for
forks in other shards: registering a fork's link, exporting what it inherits, removing the link
(``engine.fork_links`` says why links exist; ``fork_copies`` is the fork's side).

``/v1/cluster/fork-links/<source path>`` (``fork_copies`` sends these, through a node's
router, which relays them to the source's shard):

* ``POST``: validate a fork of the source as a local fork is validated, register its link
  (``Durable-Streams-Fork-Link``, idempotent) and answer the export
  (``export_frames``), streamed a slice at a time; the fork's path comes in
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

The export reads the source as any reader does (``engine.reads.read_slice``: its own history, a
local fork's ancestry, the memory tail) in slices of at most ``chunk_bytes``, so the
source's server holds one slice at a time however large the inherited part is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ...engine import copied_forks, fork_links, reads
from ...engine.engine import Engine
from ...engine.stream import Stream
from ...engine.types import CreateRequest
from ...protocol import headers as h
from ...protocol.errors import BadRequest, Conflict, MethodNotAllowed
from ...protocol.offsets import Offset, parse_offset
from . import export_frames
from .credential import require
from .fork_copies import FORK_HEADER, LINK_HEADER
from .guard import ShardGuard

CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Export:
    source: Stream
    meta: copied_forks.ExportMeta
    prefix: bytes | None


async def register(engine: Engine, request: CreateRequest, link: str) -> Export:
    """Validate ``request`` (a fork of ``request.fork_from``, named ``request.name`` in its own
    shard) as a local fork is, and register its link once (a repeated ``link`` registers
    nothing more); what the fork inherits."""
    engine.storage.check_writable()
    sliced = await engine.fork_message(request)
    source = engine.fork_source(request)
    earliest = engine.earliest_readable(source)
    fork_seq, prefix = fork_links.export_point(source, request, sliced, earliest)
    known = engine.live.links.by_link.get(link)
    if link in engine.live.links.unlinked:
        raise Conflict(f"fork link {link!r} was removed already", code="FORK_LINK_GONE")
    if known is not None and known.source_uid != source.uid:
        raise Conflict(f"fork link {link!r} belongs to another stream", code="FORK_LINK_CONFLICT")
    if known is None:
        state = fork_links.link_state(link, source, request.name)
        record = engine.reserved.submit(None, fork_links.reserved_name(source.name, link), state)
        await engine.storage.wait_durable(record.lsn)
    meta = copied_forks.ExportMeta(
        name=source.name,
        content_type=source.content_type,
        ttl_s=source.ttl_s,
        expires_at=source.expires_at,
        expires_at_ms=source.expires_at_ms,
        first_seq=earliest,
        fork_seq=fork_seq,
    )
    return Export(source, meta, prefix)


async def body(engine: Engine, export: Export, chunk_bytes: int = CHUNK_BYTES) -> AsyncIterator[bytes]:
    """The export's frames (``export_frames``), read a slice at a time."""
    meta = export.meta
    yield export_frames.meta_frame(meta)
    if export.prefix is not None:
        yield export_frames.frame(export_frames.PREFIX, export.prefix)
    seq, inherited_end, count = meta.first_seq, meta.fork_seq, 0
    while seq < inherited_end:
        sliced = await reads.read_slice(engine, export.source, Offset(seq, 0), chunk_bytes, stop=inherited_end)
        for run in sliced.runs:
            data, _ = run.lists()
            for frame in export_frames.message_frames(data):
                yield frame
            count += len(data)
        if sliced.next.seq <= seq:
            raise RuntimeError(f"the export of {export.source.name!r} made no progress at {seq}")
        seq = sliced.next.seq
    yield export_frames.end_frame(count)


async def unlink(engine: Engine, link: str) -> None:
    """Remove ``link`` (none: nothing to do); a soft-deleted source whose last fork it was goes
    with it."""
    engine.storage.check_writable()
    engine.live.links.note_unlinked(link)
    found = engine.live.links.by_link.get(link)
    if found is None:
        return
    source = engine.by_uid.get(found.source_uid)
    lsn = engine.reserved.submit(found.uid, fork_links.reserved_name(found.source, link), None).lsn
    if source is not None and source.soft_deleted and source.forks == 0:
        engine.submit_delete(source)
        lsn = max(lsn, source.last_lsn, engine.tombstones.last_lsn)
    await engine.storage.wait_durable(lsn)


async def answer(engine: Engine, guard: ShardGuard, request: Request) -> Response:
    require(guard.secret, request.url.path, request.scope["headers"])
    source = request.path_params["path"]
    if request.method == "DELETE":
        link = request.query_params.get("link")
        if not link:
            raise BadRequest("an unlink needs ?link=", code="INVALID_FORK_LINK")
        await unlink(engine, link)
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
    export = await register(engine, wanted, link)
    return StreamingResponse(body(engine, export), media_type=export_frames.CONTENT_TYPE)
