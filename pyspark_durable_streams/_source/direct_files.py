"""Direct history reads: how an executor opens a planned Parquet file.

Where the plan names the server's local path and this executor sees that file (same size:
the same machine, or a filesystem shared with the server) and option ``localFiles`` allows
it, the file is opened there and read with ordinary reads (no ``pre_buffer``: the column
chunks are read as they are decoded, no copy of the whole range first). Otherwise it is read
through its URL (signed by the server, or a presigned object-store URL) with HTTP ``Range``
requests (the client's ``Client.open_file``: its connections and TLS settings, none of its
credentials), with ``pre_buffer`` so that the column chunks of the row groups read are
fetched in a few coalesced requests. A file that is gone (404: compacted and vacuumed), whose
URL is no longer valid (403), or whose transfer broke raises ``FileGone``: the reader re-plans.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from ..client import Client, Forbidden, Gone, NotFound, TransportError
from ..options import ReadOptions
from .direct_plans import FileSlice

_GONE = (Forbidden, NotFound, Gone, TransportError)


class FileGone(RuntimeError):
    """A planned file is no longer there, or its URL no longer valid: re-plan."""


@contextmanager
def open_parquet(client: Client, planned: FileSlice, options: ReadOptions) -> Iterator[pq.ParquetFile]:
    """The planned file at the server's local path where this executor sees it (same size)
    and option ``localFiles`` allows it, else over its URL."""
    source: pa.NativeFile | None = None
    if planned.local is not None and options.local_files:
        try:
            if os.path.getsize(planned.local) == planned.size:
                source = pa.OSFile(planned.local)
        except OSError:
            pass  # not on this machine, or vacuumed: the URL says which (404: re-plan)
    pre_buffer = source is None
    if source is None:
        source = pa.PythonFile(client.open_file(planned.url, planned.size), mode="r")
    try:
        with source:
            yield pq.ParquetFile(source, pre_buffer=pre_buffer)
    except _GONE as exc:
        # (The message names the file by its path, not its URL, whose query is a grant.)
        status = f"{exc.status} " if not isinstance(exc, TransportError) else ""
        raise FileGone(f"{status}{type(exc).__name__} reading planned file {urlsplit(planned.url).path}") from exc
