"""Fork links: the forks in other shards that copied a stream of this one.

A fork whose source lives in another shard of a cluster copies what it inherits
(``copied_forks``, on the fork's shard), so it reads nothing here afterwards; but the
protocol's deletion rules still bind the pair. So the source's shard keeps a *link* per
such fork, and counts it into the source's ``forks`` exactly as a local fork is counted:
deleting the source soft-deletes it (410 to readers, a PUT re-creating it 409) while
links remain, retention does not purge it, and removing the last link removes a
soft-deleted source (the protocol's cascade, as a local fork's removal does).

A link is registered when the fork's shard asks for the export (``export_point``),
idempotent by its id (the fork's path plus a fresh incarnation id, chosen by the fork's
shard), and removed when that shard says the fork is gone (``unlink``; unknown ids are
already gone). Storage: one reserved record per link under the source root's ``__ds``
namespace (``reserved_records``), so links survive restarts like tombstones and
consumers. Counting happens in the state machine (``LinkCounts``, applied by
``transitions.LiveState`` to every reserved record, live or replayed), so a replayed
deletion of the source soft-deletes it exactly as the live one did. The cascade's removal
is a delete record of its own, submitted right after the last link's removal.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol.errors import Conflict
from ..protocol.headers import normalize_content_type
from ..storage.records import Header, Record, SubscriptionHeader, is_kind
from . import forks
from .reserved_records import RESERVED_KEY, reserved_path
from .stream import Stream
from .types import CreateRequest

KIND = "fork_link"
REMEMBERED_UNLINKS = 10_000


@dataclass(frozen=True, slots=True)
class Link:
    uid: int
    """The link record's uid."""
    link: str
    source: str
    source_uid: int
    fork: str
    """The fork's path (in its own shard)."""


def reserved_name(source: str, link: str) -> str:
    return reserved_path(source, "fork-links", link)


class LinkCounts:
    """Every link by id, counted into its source's ``forks`` (module docstring)."""

    def __init__(self, by_uid: Callable[[int], Stream | None]) -> None:
        self._stream = by_uid
        self.by_link: dict[str, Link] = {}
        self._by_uid: dict[int, Link] = {}
        self.unlinked: OrderedDict[str, None] = OrderedDict()
        """The newest links removed (or removed before they existed): an export asked for late,
        after its fork's side gave up on it and removed its link, must not register it again."""

    def note_unlinked(self, link: str) -> None:
        self.unlinked[link] = None
        while len(self.unlinked) > REMEMBERED_UNLINKS:
            self.unlinked.popitem(last=False)

    def load(self, rows: Mapping[int, Mapping[str, Any] | None]) -> None:
        """The recovered link states (before the records after them are replayed)."""
        for uid, state in rows.items():
            if state is not None and state.get(RESERVED_KEY) == KIND and not state.get("deleted"):
                self._add(uid, state)

    def apply(self, record: Record[Header]) -> None:
        """A reserved record's effect on the counts (any other record: none)."""
        if not is_kind(record, SubscriptionHeader):
            return
        state = record.header.state
        if state is not None:
            if state.get(RESERVED_KEY) == KIND:
                self._add(record.uid, state)
            return
        link = self._by_uid.pop(record.uid, None)
        if link is not None:
            del self.by_link[link.link]
            source = self._stream(link.source_uid)
            if source is not None:
                source.forks -= 1

    def _add(self, uid: int, state: Mapping[str, Any]) -> None:
        link = Link(uid, state["link"], state["source"], int(state["source_uid"]), state["fork"])
        if link.link in self.by_link:
            return
        self.by_link[link.link] = link
        self._by_uid[uid] = link
        source = self._stream(link.source_uid)
        if source is not None:
            source.forks += 1


def export_point(
    source: Stream, request: CreateRequest, sliced: tuple[bytes, int] | None, earliest: int
) -> tuple[int, bytes | None]:
    """Validate a copied fork's request against its source exactly as a local fork is
    (``creation.create_record``): its content type, then its fork point
    (``forks.resolve_fork_point``). The fork's first own sequence number and prefix."""
    if request.content_type is not None and normalize_content_type(request.content_type) != source.media_type:
        raise Conflict("a fork's content type must match its source's", code="CONTENT_TYPE_MISMATCH")
    return forks.resolve_fork_point(source, request, sliced, earliest)


def link_state(link: str, source: Stream, fork: str) -> dict[str, Any]:
    return {RESERVED_KEY: KIND, "link": link, "source": source.name, "source_uid": source.uid, "fork": fork}
