"""A source's side of a copied fork: registering the fork's link, exporting what it inherits,
removing the link (``fork_links`` says why links exist; ``fork_copies`` is the fork's side).

The export reads the source as any reader does (``reads.read_slice``: its own history, a
local fork's ancestry, the memory tail) in slices of at most ``chunk_bytes``, so the
source's server holds one slice at a time however large the inherited part is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..protocol import fork_export
from ..protocol.errors import Conflict
from ..protocol.offsets import Offset
from . import fork_links, reads
from .engine import Engine
from .stream import Stream
from .types import CreateRequest

CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Export:
    source: Stream
    meta: fork_export.ExportMeta
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
    meta = fork_export.ExportMeta(
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
    """The export's frames (``protocol.fork_export``), read a slice at a time."""
    meta = export.meta
    yield fork_export.meta_frame(meta)
    if export.prefix is not None:
        yield fork_export.frame(fork_export.PREFIX, export.prefix)
    seq, inherited_end, count = meta.first_seq, meta.fork_seq, 0
    while seq < inherited_end:
        sliced = await reads.read_slice(engine, export.source, Offset(seq, 0), chunk_bytes, stop=inherited_end)
        for run in sliced.runs:
            data, _ = run.lists()
            for frame in fork_export.message_frames(data):
                yield frame
            count += len(data)
        if sliced.next.seq <= seq:
            raise RuntimeError(f"the export of {export.source.name!r} made no progress at {seq}")
        seq = sliced.next.seq
    yield fork_export.end_frame(count)


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
