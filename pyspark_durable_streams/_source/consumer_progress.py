"""Option ``consumer``: the query's committed progress, recorded on the server as a named consumer.

Spark calls the stream reader's ``commit(end)`` only once the batch ending at ``end`` is in
its commit log, so a failed batch never moves the consumer: the server shows what the query
has really processed. But Spark makes that call only while planning the *next* batch with
data, so a query that caught up would show the last batch as lag until more data came. The
source therefore also records the ``start`` Spark passes to ``latestOffset``: Spark plans
one batch at a time and asks for the next one's end only once the batch ending at ``start``
is committed (a restart re-runs an uncommitted last batch without asking), so ``start`` is
committed progress too, and it comes at every trigger. A position is sent only when it
changed. Each record sends, per stream root (a bucket, or a server's base
surface for stream URLs), the end offset of every stream that still exists as the
incarnation read (``PUT {root}__ds/consumers/{name}``; README "Named consumers and
tombstones"). Streams of other URL shapes (another server's) are left out. Recording is
reporting, not processing: a failure is logged and the query goes on. ``record_progress``
says whether the position reached the server (the tails were looked up, so every stream
could be placed, and every PUT was answered): only then does the source count it as
recorded, so a position that was not sent is sent again at the next trigger.
``Trigger.AvailableNow`` skips the last ``commit``, but Spark asks for offsets once more
after the last batch (to learn nothing is left), so that batch's end is recorded too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..client import Consumers, DurableStreamsError
from ..client.consumers import stream_root
from .driver_streams import DriverStreams
from .incarnations import decode
from .offsets import EARLIEST, is_seq_offset, seq_offset

log = logging.getLogger("pyspark_durable_streams.source")


def locate(streams: DriverStreams, key: str) -> tuple[str, str] | None:
    """The root URL and root-relative path of stream ``key``; ``None`` for other URL shapes."""
    bucket = streams.options.bucket
    if bucket is not None:
        return streams.client.transport.url(f"{bucket}/"), key
    return stream_root(key)


def record_progress(streams: DriverStreams, consumer: str, end: Mapping[str, Any]) -> bool:
    """Record ``end`` (a committed Spark offset) as ``consumer``'s position (see the module doc);
    whether it was recorded: ``False`` before the tails were looked up (nothing is sent) or
    when a PUT failed (logged)."""
    offsets, incarnations = decode(end)
    tails = streams.cached_tails()
    if tails is None:
        return not offsets
    by_root: dict[str, dict[str, str]] = {}
    for key, offset in offsets.items():
        if key not in tails or not is_seq_offset(offset):
            continue  # gone (or not looked up yet), or not our server's offsets
        known, current = incarnations.get(key), streams.incarnations.get(key)
        if known is not None and current is not None and known != current:
            continue  # the offset belongs to an incarnation that is gone
        located = locate(streams, key)
        if located is not None:
            root, path = located
            by_root.setdefault(root, {})[path] = seq_offset(0) if offset == EARLIEST else offset
    recorded = True
    for root, positions in by_root.items():
        try:
            Consumers(streams.client.transport, root).record(consumer, positions)
        except DurableStreamsError as exc:
            log.warning("durable_streams: could not record consumer %r's progress at %s: %s", consumer, root, exc)
            recorded = False
    return recorded
