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

Object-store bytes of history reads (``FileBytes``)
---------------------------------------------------
History reads of a table on an object store open its files through ``FileBytes.open``: a
file object over the store that keeps what it fetched for the next reads, the server's
readers' and streams' alike. A fresh owner (a server that just took over a shard: its
memory tail is empty, every read goes to Delta) otherwise fetched the same small flush
files again for every read, a ranged GET per column chunk of every row group each read
decoded plus a HEAD per file opened (measured: 1,251 GETs of 59 files in a minute, reads of
5-6 s).

* **What is cached:** byte ranges of data files as Parquet reads them: the footer read
  (pyarrow reads a file's last 64 KiB for it), and the column chunks of the row groups a
  read decodes (``history_reader``: each chunk whole, one range, in a row group of at most
  ``WHOLE_GROUP_BYTES``; buffered reads of at most ``_BUFFER_BYTES`` each in a larger one). A
  file of at most ``whole_file_bytes`` (1 MiB) is fetched whole at its first read, in one
  GET: footer and every row group, for every stream it holds. A read is answered from a
  cached range that covers it, or fetched (one ranged GET) and then cached.
* **Keyed by** the file's path in the Delta log and its size (``size_bytes`` of its add
  action; the store's answer when the log's is not known): not by request, table version
  or snapshot, so a range fetched once serves every later read, across commits, refreshes
  and parked cursors.
* **Bounded** by ``max_bytes`` of cached ranges (history reads: 64 MiB,
  ``history_reader.MAX_FILE_BYTES``, beside the footers' 8 MiB; not counted in the engine's
  ``--memory-budget``), the least recently used dropped first. A range larger than a
  quarter of it is served but not kept (one large read does not empty the cache), and a
  file is fetched whole only if it would be kept. Concurrent misses of the same range wait
  for one fetch.
* **Always correct** because Delta data files are immutable: a file is written once under
  a new unique name and never rewritten in place (compaction and deletes write new files
  and remove the old ones from the log); the size in the key makes a different object
  under the same name, should one ever appear, a different entry. A cached file that was
  since removed (compacted, vacuumed) still holds exactly the rows it held, which old
  snapshots and parked cursors may still read (``history_reader``: what purges remove is
  never asked for).

Local tables are not cached here: the operating system's page cache already keeps their
recently read files, and reading them costs no request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any
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


WHOLE_FILE_BYTES = 1 << 20
"""Files at most this large are fetched whole at their first read (one GET)."""

_Key = tuple[str, int]
"""A data file: its path in the Delta log and its size in bytes."""


class FileBytes:
    """Byte ranges of a table's data files on an object store, cached across reads (see the
    module docstring). Thread-safe; reads block on the store on a miss."""

    def __init__(self, max_bytes: int, whole_file_bytes: int = WHOLE_FILE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.whole_file_bytes = whole_file_bytes
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._ranges: OrderedDict[tuple[str, int, int], pa.Buffer] = OrderedDict()
        """(path, size, start) -> the file's bytes from ``start``, least recently used first."""
        self._starts: dict[_Key, set[int]] = {}
        """The starts of each file's cached ranges."""
        self._fetching: dict[tuple[str, int, int, int], threading.Event] = {}
        self._bytes = 0

    def open(
        self,
        path: str,
        size: int | None,
        open_raw: Callable[[], Any],
        count: Callable[[int], None] = lambda nbytes: None,
    ) -> pa.PythonFile:
        """The data file at ``path`` of ``size`` bytes (``None``: not known, asked from the
        store), read through the cache. ``open_raw()`` opens the file on the store (called
        at the first miss, if any); ``count(nbytes)`` is told of every byte fetched."""
        return pa.PythonFile(_CachedFile(self, path, size, open_raw, count), mode="r")

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def _read(self, file: _CachedFile, start: int, end: int) -> pa.Buffer:
        """Bytes ``start <= i < end`` of the file, from the cache or fetched."""
        key = (file.path, file.size)
        whole = file.size <= self.whole_file_bytes and self._storable(file.size)
        fetch = (0, file.size) if whole else (start, end)
        while True:
            with self._lock:
                cached = self._lookup(key, start, end)
                if cached is not None:
                    self.hits += 1
                    return cached
                waiting = self._fetching.get((*key, *fetch))
                if waiting is None:
                    done = self._fetching[(*key, *fetch)] = threading.Event()
                    self.misses += 1
                    break
            waiting.wait()  # another read is fetching this range: then it is cached (or too large)
            if not self._storable(fetch[1] - fetch[0]):
                with self._lock:
                    self.misses += 1
                return file.fetch(start, end)
        try:
            data = file.fetch(*fetch)
            with self._lock:
                self._store(key, fetch[0], data)
        finally:
            with self._lock:
                del self._fetching[(*key, *fetch)]
            done.set()
        return data.slice(start - fetch[0], end - start)

    def _storable(self, nbytes: int) -> bool:
        return nbytes <= self.max_bytes // 4

    def _lookup(self, key: _Key, start: int, end: int) -> pa.Buffer | None:
        """(Under the lock.) A cached slice covering ``start..end``."""
        for first in self._starts.get(key, ()):
            if first <= start:
                data = self._ranges[(*key, first)]
                if first + data.size >= end:
                    self._ranges.move_to_end((*key, first))
                    return data.slice(start - first, end - start)
        return None

    def _store(self, key: _Key, start: int, data: pa.Buffer) -> None:
        """(Under the lock.) Keep a fetched range (and drop the ones it covers), then evict."""
        if not self._storable(data.size):
            return
        starts = self._starts.setdefault(key, set())
        for first in [first for first in starts if start <= first]:
            if first + self._ranges[(*key, first)].size <= start + data.size:
                self._drop((*key, first))
        self._ranges[(*key, start)] = data
        self._starts.setdefault(key, set()).add(start)
        self._bytes += data.size
        while self._bytes > self.max_bytes and self._ranges:
            self._drop(next(iter(self._ranges)))

    def _drop(self, entry: tuple[str, int, int]) -> None:
        self._bytes -= self._ranges.pop(entry).size
        key = (entry[0], entry[1])
        starts = self._starts[key]
        starts.discard(entry[2])
        if not starts:
            del self._starts[key]


class _CachedFile:
    """A data file read through ``FileBytes``: the file object ``pa.PythonFile`` wraps."""

    def __init__(
        self, cache: FileBytes, path: str, size: int | None, open_raw: Callable[[], Any], count: Callable[[int], None]
    ) -> None:
        self.cache = cache
        self.path = path
        self._open_raw = open_raw
        self._count = count
        self._raw: Any = None
        if size is None:  # (asks the store: a HEAD request)
            size = int(self._source().size())
        self.size = size
        self.position = 0
        self.closed = False

    def _source(self) -> Any:
        if self._raw is None:
            self._raw = self._open_raw()
        return self._raw

    def fetch(self, start: int, end: int) -> pa.Buffer:
        """Bytes ``start..end`` from the store (one ranged GET)."""
        source = self._source()
        source.seek(start)
        pieces = []
        while start < end:
            piece = source.read(end - start)
            if not piece:
                raise OSError(f"{self.path}: the file ended at {start} of its {self.size} bytes")
            self._count(len(piece))
            pieces.append(piece)
            start += len(piece)
        return pa.py_buffer(pieces[0] if len(pieces) == 1 else b"".join(pieces))

    def read_buffer(self, nbytes: int = -1) -> pa.Buffer:
        end = self.size if nbytes < 0 else min(self.size, self.position + nbytes)
        if end <= self.position:
            return pa.py_buffer(b"")
        data = self.cache._read(self, self.position, end)
        self.position = end
        return data

    def read(self, nbytes: int = -1) -> bytes:
        data: bytes = self.read_buffer(nbytes).to_pybytes()
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = offset if whence == 0 else self.position + offset if whence == 1 else self.size + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True
        if self._raw is not None:
            self._raw.close()
