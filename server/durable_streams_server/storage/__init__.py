"""Durability: the write-ahead log and the Delta tier.

Theory of operation
-------------------
The engine hands every state change to ``Storage.submit`` synchronously, in the order it
applied them, as a typed record (``records``); ``submit`` stamps the next LSN and queues
the record. A request is acknowledged only after ``wait_durable(lsn)`` returns
(``acks``: LSNs and the waiters for them).

``durability="wal"``: the WAL writer (``wal_writer``) hands each record's frame to the sync
thread at the end of the loop's turn that submitted it, under storage's sync policy
(``sync_policy.SyncPolicy``):
every write and sync of the log runs on that one dedicated thread, never on the event
loop's, so a slow sync delays only the appends waiting for it, never the loop's other
requests. The thread writes everything handed over since its last batch with one
``pwritev(RWF_DSYNC)`` (or ``pwrite`` + ``fdatasync`` where the flag is refused: ``wal``),
and only after that call returns hands the loop the mark that makes them durable (group
commit: while one batch syncs, the next one accumulates, and is taken as soon as the
sync returns). The flusher (``flusher``) periodically cuts the log at the newest LSN,
asks the engine for the state of every stream the cut's records touched
(``view.StateView``), and commits messages + states to Delta (``delta_log``) with the cut
LSN as the commit's application-transaction version. The WAL (``wal``) starts a new
segment at the cut (on the sync thread, in log order), and segments below it are deleted
once the commit has succeeded. On a local disk a commit succeeds
only once its data files, log entry and directories are fsynced (``local_sync``:
delta-rs never syncs local files), so no record is ever durable nowhere.

``durability="delta"``: no WAL; the flusher runs continuously and a record is durable
when the Delta commit containing it succeeds (group commit at Delta's pace).

Recovery is the mirror image: newest Delta state per stream, then the WAL records after
the Delta commit's LSN (``view.Recovery``), replayed by the engine in order through the
same transitions that live requests use. A state checkpoint (``state_checkpoint``) keeps
that read flat: recovery reads the newest checkpoint's rows (one per live uid) and the rows
of the flushes after it, whatever the number of flushes before.

Maintenance is flat in history too (``compaction``): each pass costs what was written since
the last one. It takes a state checkpoint, purges removed streams (their tombstones in
Delta are the durable intention, resumed after a restart) and messages below retention
points, bin-packs the files written since the last pass into files of a target size sorted
by stream (``compaction_plan``: bins are LSN spans, so a rewrite replaces exactly the rows
it read; ``bin_rewrite``: a bin is sorted within the pass's memory share, its sorted runs
spilled to local disk and merged as the writer takes them, ``sorted_runs``) and vacuums; a
pass with nothing new writes nothing. The
Delta log itself is kept to its two newest checkpoints and the commits after them
(``log_trim``, after every log checkpoint), because delta-rs lists it on every commit and
open: a commit costs the same after a million commits as after a hundred.

History reads (``history_reader``) seek: the file statistics in the Delta log and the row
group statistics in the Parquet footers say where a stream's messages from an offset are,
and a read streams pages from there until its byte budget is filled, parking its position
for the next read. A read costs what it serves (plus at most one row group when it starts
inside one), not the stream's history.

Read plans (``read_plans``) let Spark executors read history from the data files themselves:
for a stream's uid and a sequence range they name a table version's files and row groups
(Delta log statistics, cached Parquet footers: ``footers``) and how readers reach them
(presigned S3 URLs: ``presign``; any other table's files through the HTTP layer's signed
file endpoint, read from the local disk or, by the server, from the object store:
``stored_files``). Vacuum keeps a replaced file ``vacuum_retention_hours``, at least as long as
a plan's URLs are valid.

Object-store outages
--------------------
A failed Delta commit is retried by the flusher with backoff, forever and without giving
up on the batch (the commit is idempotent: see ``flusher``). What the outage means for
requests depends on the durability mode:

* ``wal``: nothing changes for clients while the WAL has room; records keep being
  acknowledged after their fsync and pile up in the WAL (and in memory). Once the WAL
  holds more than ``max_wal_bytes``, new writes get 503 (``WAL_FULL``, with a retry
  delay). When a commit succeeds again the WAL segments below it are deleted and writes
  are accepted again, without a restart.
* ``delta``: a record is acknowledged only by its commit, so the first failed attempt
  (or one without an answer for ``commit_timeout_s``: a store that hangs rather than
  refuses) answers every waiting request with 503 (``COMMIT_IN_DOUBT``): like a
  timeout, the write may or may not become durable. Its record stays applied in memory
  and queued, and does commit once the store is back (or is lost with a crash before
  that: it was never acknowledged). Readers never see it before it commits, since
  visibility follows durability. A producer retrying the same (id, epoch, seq) after the
  outage therefore meets either its committed record (duplicate: 204) or, after a
  restart that lost it, no record (accepted): exactly one copy either way. A plain append
  resent after it may duplicate, as after any timeout: the Python client does not resend one
  (its ``errors.IN_DOUBT_CODES``), though the answer carries ``Retry-After``. Until a commit succeeds
  again, new writes are refused up-front (``DELTA_UNAVAILABLE``).

Refusals happen in ``check_writable`` (``admission``), which the engine calls before it
validates or changes anything, so a refused write leaves memory untouched. A WAL write
or fsync failure (local disk) is different: memory may be ahead of the WAL, so storage
refuses writes until a restart (``STORAGE_FAILED``), answering at once instead of
hanging. A refusal carries ``retry_after_s``; storage never builds HTTP headers.

Modules: ``committer`` (the ``Storage`` facade wiring the rest), ``records`` and
``message_batch`` (WAL records; a bulk append's buffers), ``acks``, ``admission``, ``wal``,
``wal_writer`` and ``sync_policy``, ``leftover_wal`` (a WAL a delta-mode start would leave behind),
``flusher``, ``delta_log`` (the table) with ``table_schema`` and
``commit_rows`` (a flush's rows), ``state_rows`` (what recovery parses now or later),
``state_checkpoint``, ``log_trim``, ``history_reader`` with ``footers``, ``read_plans``
(what Spark executors may read directly) and ``presign`` (S3 URLs), ``data_files`` (local files read
with pyarrow), ``compaction_plan``, ``compaction`` with ``bin_rewrite`` and ``sorted_runs``,
``view`` (what storage and the engine hand each other), ``observer`` (metrics hooks).
Storage never imports the engine.
"""

from .committer import Storage, StorageConfig
from .compaction import CompactionConfig
from .durability import Durability
from .view import Recovery, StateView

__all__ = ["CompactionConfig", "Durability", "Recovery", "StateView", "Storage", "StorageConfig"]
