"""A parked long-poll's answer, made ready before its wake and finished at it (``ParkedRead``).

A long-poll parked on the fast path is answered at its wake, from the group commit's
completion (``Stream.wake``): nothing between the sync and the reader's bytes but this. The
work then is all first-touched after the idle moment before the append, which runs several
times slower than warm code (bench/README.md): so what can be made before the wake is. A
``ParkedRead`` renders the stream's header lines when the read parks; ``ParkedRead.answer``
reads the new messages from memory (``reads.read_now``), renders the read's few lines and hands
status, lines and body to the connection (``AnswerNow``: ``FastCycle.answer_now``), which adds
its default, security and framing lines as for any answer. The bytes are the app path's answer
to a plain long-poll (tests/server/test_long_poll_wake.py): the same headers, in the same order.

Whatever needs waiting for or is rare is left to the reader's task, a turn of the loop later,
which answers as it would without this: the stream replaced, deleted or expired meanwhile,
messages not in memory, an ``If-None-Match`` that matches (a 304), a connection that cannot
take the bytes at once.
"""

from __future__ import annotations

from collections.abc import Callable

from ...engine import reads
from ...protocol.errors import ProtocolError
from ...protocol.json_mode import frame
from ..read_answers import ParkedLongPoll, position_headers, stream_headers
from ..responses import head_lines

AnswerNow = Callable[[int, bytes, bytes], bool]
"""Writes an answer (status, header lines, body) at once if the connection can take it
(``FastCycle.answer_now``); ``False``: it cannot."""


class ParkedRead:
    """A plain long-poll parked at the wake, its answer made ready to finish then (``answer``)."""

    __slots__ = ("_lines", "answer_now", "parked")

    def __init__(self, parked: ParkedLongPoll, answer_now: AnswerNow) -> None:
        self.parked = parked
        self.answer_now = answer_now
        self._lines = head_lines(stream_headers(parked.stream))

    def answer(self) -> bool:
        """Answer now, at the wake, if nothing needs waiting for; ``False``: the task answers."""
        parked, lines = self.parked, self._lines
        engine, stream = parked.engine, parked.stream
        if lines is None:
            return False  # (a value no head may carry: the task's answer fails as usual)
        if engine.streams.get(stream.name) is not stream or stream.soft_deleted or stream.expired(engine.clock()):
            return False  # (the task answers what became of it)
        try:
            found = reads.read_now(engine, stream, parked.start, parked.max_bytes)
        except ProtocolError:
            return False  # (e.g. retention moved past the offset: the task answers the error)
        if found is None or not found.chunks:
            return False
        position = position_headers(found, parked.token, "long-poll", parked.cursor)
        if position["ETag"] == parked.if_none_match:
            return False  # (a 304)
        body = frame(found.chunks) if stream.is_json else b"".join(found.chunks)
        position["Content-Length"] = str(len(body))  # (last, as Starlette adds it)
        read_lines = head_lines(position)
        if read_lines is None or not self.answer_now(200, lines + read_lines, body):
            return False
        engine.touch(stream)
        return True
