"""Files read in place over HTTP ``Range`` requests: the data files a read plan lists.

A ``RemoteFile`` is a read-only, seekable binary file of known size whose every read is one
``GET`` with a ``Range`` header, so a Parquet reader fetches the footer and then only the
column chunks it decodes. Its URL is its own grant (the server's signed file URL, or an
object store's presigned URL), so the requests go through the client's connection pool, TLS
settings and timeouts but carry none of its credentials: a bearer token must not reach an
object store, which also refuses a presigned request that carries a second credential.

Errors are the client's: ``Forbidden`` (403: a bad or expired signature), ``NotFound`` (404:
the file is gone), ``Gone``, or a ``TransportError`` when the connection fails mid-body.
"""

from __future__ import annotations

import io
from typing import Any

from ._http import HTTP, whole_body


class RemoteFile(io.RawIOBase):
    """A read-only, seekable file over HTTP ``Range`` GETs of one URL of known size."""

    def __init__(self, http: HTTP, url: str, size: int) -> None:
        super().__init__()
        self._http, self.url, self.size = http, url, size
        self._pos = 0

    def __repr__(self) -> str:
        return f"RemoteFile({self.url!r}, size={self.size})"

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        if end <= self._pos:
            return b""
        response = self._http.request(
            "GET",
            self.url,
            ok=(200, 206),
            headers={"Range": f"bytes={self._pos}-{end - 1}"},
            stream=True,
            credentials=False,
        )
        with response:
            data = whole_body(response, "GET")
        if response.status_code == 200:  # a server that ignores Range sends the whole file
            data = data[self._pos : end]
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
