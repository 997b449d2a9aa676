"""What can be told of a stream without building it.

Some work looks at many streams without using any: a subscription's backfill links every stream
its pattern matches at its tail, a restart repairs each subscription's links, a shard reports the
tails of the streams another shard's subscriptions want, a consumer's lag is read at each scrape.
Building a cold stream for a look (``stream_index``) would cost what using it does: its ``Stream``
(about a kilobyte, and the cyclic collector's time until it sleeps again) for each stream looked
at; a subscription made on a server of 20,000 sleeping streams, its pattern matching none of them,
built 18,100-18,600 and held the event loop 0.9 s (0.06-0.15 s now). ``StreamIndex.look`` gives
the built ``Stream`` or the cold one's kept state, parsed; ``StreamFacts.of`` reads the same facts
from either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .stream import Stream, incarnation


@dataclass(frozen=True, slots=True)
class StreamFacts:
    uid: int
    tail: int
    """Visible messages (a cold stream's are all durable: a stream sleeps only once they are)."""
    created_ms: int
    bytes_total: int
    last_write_ms: int
    soft_deleted: bool

    @property
    def live(self) -> bool:
        return not self.soft_deleted

    @property
    def incarnation(self) -> str:
        return incarnation(self.uid, self.created_ms)

    @classmethod
    def of(cls, found: Stream | Mapping[str, Any] | None) -> StreamFacts | None:
        """From ``StreamIndex.look``'s answer: a built stream, a cold one's state, or nothing."""
        if found is None:
            return None
        if isinstance(found, Stream):
            return cls(
                found.uid,
                found.visible_tail,
                found.created_ms,
                found.bytes_total,
                found.last_write_ms,
                found.soft_deleted,
            )
        return cls(
            found["uid"],
            found["tail"],
            found["created_ms"],
            found.get("bytes_total", 0),
            found.get("last_write_ms", 0),
            found.get("soft_deleted", False),
        )
