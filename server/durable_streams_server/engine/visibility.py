"""What readers see: a stream's tails become visible once the records behind them are durable.

A live request applies its record in memory at once (the *applied* tail validates the next
append) and publishes the tail it reached here with the record's LSN. Storage calls
``on_durable`` after each group commit; every tail published up to that LSN becomes the
stream's ``visible_tail`` (and ``visible_closed``), the stream's waiting readers are woken
(long-polls, SSE) and the hooks told (subscriptions). So no reader ever sees what a crash
could still take back.

A stream appended to asleep (``cold_appends``) publishes its ``cold_tails.ColdTail``: nobody
waits on a sleeping stream, so only its visible tail moves and the hooks are told; if a lookup
has built the stream meanwhile, what was published for the ``ColdTail`` goes to that stream.
"""

from __future__ import annotations

from collections import deque

from .cold_tails import ColdTail
from .stream import Stream
from .transitions import LiveState


class Visibility:
    def __init__(self, live: LiveState) -> None:
        self.live = live
        self._becoming: deque[tuple[int, Stream | ColdTail, int, bool]] = deque()

    def publish(self, lsn: int, stream: Stream) -> None:
        """``stream``'s tail and closure now become visible once ``lsn`` is durable."""
        self._becoming.append((lsn, stream, stream.tail, stream.closed))

    def publish_asleep(self, lsn: int, cold: ColdTail) -> None:
        """The sleeping stream's tail now (``cold.tail``) becomes visible once ``lsn`` is durable."""
        self._becoming.append((lsn, cold, cold.tail, False))

    def on_durable(self, lsn: int) -> None:
        queue = self._becoming
        woken: dict[int, Stream] = {}
        asleep: dict[int, ColdTail] = {}
        while queue and queue[0][0] <= lsn:
            _, stream, tail, closed = queue.popleft()
            if isinstance(stream, ColdTail):
                if stream.stream is None:
                    stream.visible_tail = tail
                    asleep[stream.uid] = stream
                    continue
                stream = stream.stream  # (built since, by a lookup)
            stream.visible_tail = tail
            stream.visible_closed = closed
            woken[stream.uid] = stream
        live = self.live
        hooks = live.hooks
        for stream in woken.values():
            stream.wake()
            if hooks is not None and live.by_uid.get(stream.uid) is stream and not stream.soft_deleted:
                hooks.on_visible(stream)
        for cold in asleep.values():
            if hooks is not None:
                hooks.on_visible(cold)
            live.index.cold_tails.settle(cold)
