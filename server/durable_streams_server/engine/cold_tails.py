"""What a stream appended to while asleep keeps beside its state until its records are in Delta.

An append to a sleeping stream need not build its ``Stream`` (``cold_appends``): the cold
index keeps its state with the new tail (``cold_streams``). What a built stream would keep
besides its state is kept here, in a ``ColdTail`` per such stream, until the flush that
writes its records has been committed and they are visible:

- the messages not yet in Delta (a read must find them before the flush does: from memory);
- the visible tail: what readers may see, behind the tail until the records are durable;
- the newest record's LSN (what a later request on the stream awaits).

Three events move a ``ColdTail``; all run on the event loop:

- a lookup builds the stream (``StreamIndex._wake``): ``adopt`` gives the new ``Stream`` the
  unflushed messages in its memory tail, the visible tail and the LSN, as if it had been built
  all along, and the ``ColdTail`` leaves the table; the visibility still queued for it then
  goes to that ``Stream`` (``stream``);
- the records become durable (``Engine.on_durable``): its visible tail moves;
- a flush is committed (``Engine.on_flushed``, with the state the flush wrote): the messages
  below that state's tail are in Delta and are let go (``flushed``).

Once it holds no message and its visible tail has reached its tail, the state in the cold
index says all there is, and the ``ColdTail`` leaves the table (``settle``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .stream import Stream

Appended = tuple[int, tuple[bytes, ...], int]
"""One record's messages: its first seq, the messages, the append's time (ms)."""


@dataclass(slots=True, eq=False)
class ColdTail:
    state: dict[str, Any]
    """The stream's state as the cold index keeps it (JSON there): the next append and the flush
    take it from here rather than parse it again (the flush takes a copy)."""
    visible_tail: int
    flushed_tail: int
    """The messages below it are in Delta."""
    last_lsn: int
    appended: list[Appended] = field(default_factory=list)
    """The records not yet in Delta, in order (contiguous from ``flushed_tail``)."""
    stream: Stream | None = None
    """The ``Stream`` a lookup built meanwhile: visibility queued for this goes to it."""

    @property
    def name(self) -> str:
        name: str = self.state["name"]
        return name

    @property
    def uid(self) -> int:
        uid: int = self.state["uid"]
        return uid

    @property
    def created_ms(self) -> int:
        created_ms: int = self.state["created_ms"]
        return created_ms

    @property
    def tail(self) -> int:
        """The tail after the newest record."""
        tail: int = self.state["tail"]
        return tail


class ColdTails:
    def __init__(self) -> None:
        self._tails: dict[int, ColdTail] = {}
        self.appends = 0
        """Appends to sleeping streams so far (the ``durable_streams_cold_appends_total`` metric)."""

    def __len__(self) -> int:
        return len(self._tails)

    def __contains__(self, uid: int) -> bool:
        return uid in self._tails

    def get(self, uid: int) -> ColdTail | None:
        return self._tails.get(uid)

    def appended(
        self, state: dict[str, Any], first_seq: int, messages: tuple[bytes, ...], ts_ms: int, lsn: int
    ) -> ColdTail:
        """A record appended to a sleeping stream whose tail was ``first_seq``; ``state`` is its state
        after it."""
        uid: int = state["uid"]
        cold = self._tails.get(uid)
        if cold is None:  # (asleep with nothing pending: everything below its tail is in Delta and visible)
            cold = self._tails[uid] = ColdTail(state, first_seq, first_seq, lsn)
        cold.state = state
        cold.appended.append((first_seq, messages, ts_ms))
        cold.last_lsn = lsn
        self.appends += 1
        return cold

    def adopt(self, stream: Stream) -> None:
        """``stream`` was just built from its cold state: give it what was kept for it here."""
        cold = self._tails.pop(stream.uid, None)
        if cold is None:
            return
        assert stream.tail == cold.tail, (stream.uid, stream.tail, cold.tail)
        bytes_total = stream.bytes_total  # (the state counts these messages already: ``remember`` would twice)
        if not len(stream.mem):  # (else it holds its kept flushed messages, up to ``flushed_tail``)
            stream.mem_base = cold.flushed_tail
        stream.flushed_tail = cold.flushed_tail
        for first_seq, messages, ts_ms in cold.appended:
            stream.remember(first_seq, messages, ts_ms)
        stream.bytes_total = bytes_total
        stream.visible_tail = cold.visible_tail
        stream.last_lsn = cold.last_lsn
        cold.stream = stream
        cold.appended = []

    def flushed(self, uid: int, state: Mapping[str, Any]) -> list[Appended]:
        """A committed flush wrote ``uid``'s ``state``: its messages below the state's tail are in
        Delta, and let go here (returned: ``asleep_tails`` keeps them for reads)."""
        cold = self._tails.get(uid)
        if cold is None:
            return []
        tail: int = state["tail"]
        appended = cold.appended
        done = 0
        while done < len(appended) and appended[done][0] + len(appended[done][1]) <= tail:
            done += 1
        flushed = appended[:done]
        del appended[:done]
        cold.flushed_tail = max(cold.flushed_tail, tail)
        self.settle(cold)
        return flushed

    def settle(self, cold: ColdTail) -> None:
        """Let ``cold`` go once its state says all: nothing unflushed, everything visible."""
        if not cold.appended and cold.visible_tail >= cold.tail and self._tails.get(cold.uid) is cold:
            del self._tails[cold.uid]
