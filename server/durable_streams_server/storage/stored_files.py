"""A table's data files on an object store, read by the server for readers that cannot reach it.

Read plans hand executors a URL per planned file. For an ``s3://`` table with static
credentials that is a presigned GET (``presign``): executors read from S3 and the server
serves no bytes. Any other object store the server can open (``az://``, ``gs://``, an
``s3://`` table whose credentials come from an instance role, ...) gets URLs to the server's
own signed file endpoint, and the HTTP layer answers them with the bytes read here, through
the same delta-rs object-store handler that reads the table. Executors thus need neither the
store's credentials nor a route to it, only to the server.

A file is read in ranges of at most ``CHUNK_BYTES``, each a single ranged GET on the store,
so a response holds one chunk in memory at a time and each blocking call (made on a worker
thread by the caller) is short. Only data files are served: a path must be relative, stay
inside the table and not name the Delta log; the URL's signature (checked by the HTTP layer)
already limits a reader to the files a plan named.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from deltalake.fs import DeltaStorageHandler

CHUNK_BYTES = 1 << 20


def is_data_file_path(path: str) -> bool:
    """Whether ``path`` (as in the Delta log: relative to the table root) may name a data file."""
    if not path or path.startswith("/") or "\\" in path:
        return False
    parts = path.split("/")
    return all(part not in ("", ".", "..") for part in parts) and "_delta_log" not in parts


@dataclass(frozen=True, slots=True)
class StoredFile:
    """An open data file: its size, and its bytes in chunks (``read``)."""

    size: int
    source: pa.NativeFile

    def read(self, start: int, end: int) -> Iterator[bytes]:
        """Bytes ``start <= i < end`` of the file, in chunks of at most ``CHUNK_BYTES``.
        Blocks on the store for each chunk; closes the file when exhausted or closed."""
        try:
            position = start
            while position < end:
                self.source.seek(position)
                chunk = self.source.read(min(CHUNK_BYTES, end - position))
                if not chunk:
                    raise OSError(f"the file ended at {position} of its {self.size} bytes")
                position += len(chunk)
                yield chunk
        finally:
            self.source.close()


class StoredFiles:
    """Opens the data files of one table on an object store."""

    def __init__(self, uri: str, storage_options: Mapping[str, str]) -> None:
        self.uri = uri
        self._handler = DeltaStorageHandler(uri, dict(storage_options))

    def open(self, path: str) -> StoredFile | None:
        """The data file at ``path``; ``None`` when it is not a data file path or is no longer
        there (compacted and vacuumed). Blocks (one metadata request to the store)."""
        if not is_data_file_path(path):
            return None
        try:
            source = self._handler.open_input_file(path)
        except FileNotFoundError:
            return None
        return StoredFile(source.size(), source)


def open_local(local: Path | None) -> StoredFile | None:
    """A table's data file on the local disk, opened as ``StoredFiles.open`` opens one on a store:
    ``None`` when it is gone (vacuumed since it was planned); once open, the file can be read to
    its end even if it is deleted meanwhile."""
    if local is None:
        return None
    try:
        source = pa.OSFile(str(local), "r")
    except FileNotFoundError:
        return None
    return StoredFile(source.size(), source)
