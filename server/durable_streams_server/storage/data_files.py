"""Reading data files of a table in a local directory with pyarrow's native file system.

History reads open each file they plan through it (``open_local``): cheaper than opening
through delta-rs's object-store handler (bench/README.md, "Figures behind design choices"),
which matters to a read over many small files before compaction.

Compaction reads each bin's files one at a time, in batches of a bounded size (a bin is made
of whole files: ``compaction_plan``; ``bin_rewrite`` sorts the batches within its memory
share). Reading them through a Delta scan lets delta-rs's query engine read the files
concurrently and buffer them (bench/README.md, "Compaction memory"); read file by file with
pyarrow's native file system, a batch costs its decoded rows and the row group it comes from.

Only for local tables: pyarrow reaches an object store's files only through delta-rs's
``DeltaStorageHandler``, whose calls hold the GIL for the whole request (an S3 GET would
stall the event loop), so tables on object stores keep the Delta scan (``local`` is False).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq


def local_root(table_uri: str) -> str | None:
    """The directory of a table in a local directory (with a trailing ``/``); ``None`` for a
    table on an object store."""
    parsed = urlparse(table_uri)
    if parsed.scheme not in ("", "file"):
        return None
    return (unquote(parsed.path) if parsed.scheme else table_uri).rstrip("/") + "/"


def open_local(root: str, path: str) -> pa.NativeFile:
    """A data file of a local table by its path in the Delta log (relative, URL-encoded)."""
    return _LOCAL.open_input_file(root + unquote(path))


_LOCAL = pafs.LocalFileSystem()


class DataFiles:
    def __init__(self, table_uri: str) -> None:
        root = local_root(table_uri)
        self.local = root is not None
        self._root = root or ""

    def batches(self, paths: Sequence[str], schema: pa.Schema, batch_bytes: int) -> Iterator[pa.RecordBatch]:
        """Every row of the files at ``paths`` (relative to the table), as ``schema``, file by
        file in batches of about ``batch_bytes`` decoded (by the file's mean row size)."""
        assert self.local, "object stores are read through a Delta scan"
        for path in paths:
            with pq.ParquetFile(self._root + unquote(path), filesystem=_LOCAL, pre_buffer=False) as parquet:
                metadata = parquet.metadata
                decoded = sum(metadata.row_group(index).total_byte_size for index in range(metadata.num_row_groups))
                rows = max(1, batch_bytes // max(1, decoded // max(1, metadata.num_rows)))
                for batch in parquet.iter_batches(batch_size=rows, use_threads=False):
                    yield batch.cast(schema)
