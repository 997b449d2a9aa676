"""Was anything lost when a stream the query reads was deleted (or deleted and created again)?

A routine deletion of a stream the query had read to its end loses nothing: in a bucket of
short-lived streams (one per session, deleted when done) it happens all the time, and failing
the query for it would push users to ``failOnDataLoss=false``, which also hides real loss.
The server keeps a deleted stream's end (its tombstone: incarnation and final offset,
``Consumers.tombstone``) for a retention period, so the source asks: the tombstone of the
incarnation the query was reading, with a final offset at or before the offset read, means
nothing was missed. Anything else is data loss as before, with the count of messages missed
where the tombstone tells it. Without a tombstone (another server, past the retention), or
when the query does not know which incarnation it read (a checkpoint from before offsets
carried incarnations: any tombstone of the path could be a later incarnation's), the
deletion is loss: the safe side. A
lookup that fails (the server unreachable, or answering "later" past the client's backoff)
fails the query instead of becoming a verdict: a restart asks again.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..client import Consumers
from .consumer_progress import locate
from .driver_streams import DriverStreams
from .offsets import SEQ_OFFSET, is_seq_offset, pending_messages


@dataclass(frozen=True)
class Verdict:
    read_all: bool
    """The deleted incarnation ended at or before the offset read: nothing was missed."""
    cause: str | None = None
    """What was missed, where the tombstone tells (for the data-loss message)."""


def judge(streams: DriverStreams, key: str, offset: str, known: str | None) -> Verdict:
    """What the server's tombstone of ``key`` says of a query that read it up to ``offset``
    (of incarnation ``known``, if known)."""
    located = locate(streams, key)
    if located is None or not is_seq_offset(offset):
        return Verdict(False)
    root, path = located
    # A failed lookup (after the client's retries of "later" answers) is raised, not judged: the
    # query fails and a restart judges again, where taking it for "no tombstone" would be loss.
    tombstone = Consumers(streams.client.transport, root, streams.client.backoff).tombstone(path)
    if tombstone is None or SEQ_OFFSET.match(tombstone.final_offset) is None:
        return Verdict(False)
    if known is None:  # (a checkpoint from before incarnations were recorded: whose end is it?)
        return Verdict(
            False, "the incarnation this query read is unknown, so the server's record of its end cannot vouch"
        )
    if tombstone.incarnation != known:
        return Verdict(False, f"the server's record of its end is of another incarnation ({tombstone.incarnation})")
    missed = pending_messages(offset, tombstone.final_offset)
    if missed <= 0:
        return Verdict(True)
    return Verdict(
        False,
        f"it was deleted with {missed} message(s) this query had not read (offsets {offset} to "
        f"{tombstone.final_offset}, incarnation {tombstone.incarnation})",
    )
