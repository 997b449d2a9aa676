"""The signed file endpoint's answer for a table on an object store: the file's bytes, read by
the server from the store (``storage.stored_files``), whole or one ``Range``.

Opening the file (one metadata request) and each chunk of the body are blocking calls on the
store, so they run on worker threads (Starlette iterates a plain iterator in its thread
pool): the event loop serves other requests meanwhile, and a response holds one chunk.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..protocol.byte_ranges import byte_range
from ..protocol.errors import NotFound, RangeNotSatisfiable
from ..storage.stored_files import StoredFiles, open_local

PARQUET = "application/vnd.apache.parquet"


async def stored_file_response(request: Request, stored: StoredFiles | Path | None, path: str) -> Response:
    """``GET``/``HEAD`` of the table's data file ``path`` (the URL's signature already checked),
    from its object store, or from the local disk (``stored`` its local path, ``None``: not there)."""
    if isinstance(stored, StoredFiles):
        found = await asyncio.to_thread(stored.open, path)
    else:
        found = await asyncio.to_thread(open_local, stored)
    if found is None:
        raise NotFound(f"data file {path!r} is not in the table (compacted and vacuumed?)", code="FILE_NOT_FOUND")
    try:
        span = byte_range(request.headers.get("range"), found.size)
    except RangeNotSatisfiable:
        found.source.close()
        raise
    start, end = span if span is not None else (0, found.size)
    headers = {"Cache-Control": "no-store", "Accept-Ranges": "bytes", "Content-Length": str(end - start)}
    if span is not None:
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{found.size}"
    status = 206 if span is not None else 200
    if request.method == "HEAD":
        found.source.close()
        return Response(status_code=status, headers=headers, media_type=PARQUET)
    return StreamingResponse(found.read(start, end), status_code=status, headers=headers, media_type=PARQUET)
