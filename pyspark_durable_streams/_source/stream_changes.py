"""What became of the streams a query reads since a batch's start, judged for data loss.

Each micro-batch's end starts from the previous end (``decode``: offsets and incarnations) and
follows every stream to its tail: a new stream of a subscription joins (once it holds anything),
a stream of the same incarnation moves on, and a stream deleted, or deleted and created again,
since the start is data loss (``incarnations``) unless the server's tombstone shows the query had
read all of it (``deletions``: a deleted stream then leaves the query, a new incarnation is read
from its beginning, both logged). With ``failOnDataLoss=false`` a deleted stream keeps its offset
(it yields nothing, logged once) and a new incarnation is read from its beginning.
"""

from __future__ import annotations

import logging

from .deletions import judge
from .driver_streams import DriverStreams
from .incarnations import deleted_message, new_incarnation, recreated_message
from .offsets import EARLIEST, seq_offset
from .task_reader import DataLossError

log = logging.getLogger("pyspark_durable_streams.source")

Position = tuple[dict[str, str], dict[str, str]]
"""(protocol offsets, known incarnations) by stream key, as ``decode`` gives them."""
_EMPTY_STREAM = seq_offset(0)


class StreamChanges:
    """Follows the streams from a batch's start to their tails; keeps which deletions were logged.

    Holds no driver (the stream reader that owns it is pickled to executors): each call is given one.
    """

    def __init__(self, fail_on_data_loss: bool) -> None:
        self._fail_on_data_loss = fail_on_data_loss
        self._deleted_logged: set[str] = set()

    def follow(self, streams: DriverStreams, start: Position, tails: dict[str, str]) -> Position:
        """The position at the streams' ``tails`` (those of ``streams``' last look), from ``start``."""
        end: Position = (dict(start[0]), dict(start[1]))
        for key, tail in tails.items():
            if key in start[0] or tail != _EMPTY_STREAM:  # (a new, still empty stream: nothing to read yet)
                self._moved(streams, key, tail, start, end)
        for key in sorted(set(start[0]) - set(tails)):
            if (key in streams.missing or streams.bucket is not None) and key not in self._deleted_logged:
                self._gone(streams, key, start, end)
        return end

    def _moved(self, streams: DriverStreams, key: str, tail: str, start: Position, end: Position) -> None:
        """Stream ``key`` is at ``tail`` now: same incarnation, or a new one (judged)."""
        first, known = start[0].get(key, EARLIEST), start[1].get(key)
        current = streams.incarnations.get(key)
        reason = new_incarnation(first, known, tail, current) if key in start[0] else None
        if reason is not None:
            verdict = judge(streams, key, first, known)
            if verdict.read_all:
                log.info("durable_streams: stream %s was created again after this query read all of it", key)
            else:
                reason = f"{reason}; {verdict.cause}" if verdict.cause else reason
                self._data_loss(recreated_message(key, first, known, current, reason))
        end[0][key] = tail if reason is not None else max(first, tail)
        self._deleted_logged.discard(key)
        end[1].pop(key, None)
        if current is not None:
            end[1][key] = current

    def _gone(self, streams: DriverStreams, key: str, start: Position, end: Position) -> None:
        """Stream ``key`` was deleted: it leaves the query if it was read to its end, else data loss."""
        offset, known = start[0][key], start[1].get(key)
        verdict = judge(streams, key, offset, known)
        if verdict.read_all:  # a routine deletion: the stream leaves the query
            log.info("durable_streams: stream %s was deleted after this query read all of it", key)
            del end[0][key]
            end[1].pop(key, None)
            return
        cause = verdict.cause or str(streams.missing.get(key) or "it is no longer in the bucket's listing")
        self._data_loss(deleted_message(key, offset, known, cause), once=key)

    def _data_loss(self, message: str, once: str | None = None) -> None:
        """Fail (``failOnDataLoss=true``) or log the loss (once per deleted stream)."""
        if self._fail_on_data_loss:
            raise DataLossError(message)
        if once is None or once not in self._deleted_logged:
            log.warning("durable_streams: %s (failOnDataLoss=false: continuing)", message)
        if once is not None:
            self._deleted_logged.add(once)
