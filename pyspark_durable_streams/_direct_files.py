"""Direct history reads: how an executor opens a planned Parquet file.

Where the plan names the server's local path and this executor sees that file (same size:
the same machine, or a filesystem shared with the server) and option ``localFiles`` allows
it, the file is opened there and read with ordinary reads (no ``pre_buffer``: the column
chunks are read as they are decoded, no copy of the whole range first). Otherwise it is read
through its URL (signed by the server, or a presigned object-store URL) with HTTP ``Range``
requests (``_RangeFile``), with ``pre_buffer`` so that the column chunks of the row groups
read are fetched in a few coalesced requests. A file that is gone (404: compacted and
vacuumed) or whose URL is no longer valid (403) raises ``FileGone``: the reader re-plans.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import requests

from ._direct_plans import FileSlice
from .options import ReadOptions


class FileGone(RuntimeError):
    """A planned file is no longer there, or its URL no longer valid: re-plan."""


class _RangeFile(io.RawIOBase):
    """A read-only, seekable file over HTTP ``Range`` GETs of one URL of known size."""

    def __init__(self, http: requests.Session, url: str, size: int, timeout_s: float) -> None:
        self._http, self._url, self._size, self._timeout = http, url, size, timeout_s
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        if end <= self._pos:
            return b""
        try:
            response = self._http.get(
                self._url, headers={"Range": f"bytes={self._pos}-{end - 1}"}, timeout=self._timeout
            )
            data = response.content
        except requests.RequestException as exc:  # e.g. the file vacuumed while it was being sent
            raise FileGone(f"reading a planned file failed: {exc}") from exc
        if response.status_code in (403, 404, 410):
            raise FileGone(f"{response.status_code} for a planned file: {response.text[:300]}")
        if response.status_code not in (200, 206):
            response.raise_for_status()
            raise OSError(f"unexpected status {response.status_code} reading a planned file")
        if response.status_code == 200:
            data = data[self._pos : end]
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


@contextmanager
def open_parquet(http: requests.Session, planned: FileSlice, options: ReadOptions) -> Iterator[pq.ParquetFile]:
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
        source = pa.PythonFile(_RangeFile(http, planned.url, planned.size, options.connection.timeout_s), mode="r")
    with source:
        yield pq.ParquetFile(source, pre_buffer=pre_buffer)
