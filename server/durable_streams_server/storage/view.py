"""What storage and the engine hand each other across the layer boundary.

Storage never imports the engine: it sees it only through ``StateView`` (state snapshots
for a flush, progress callbacks), and hands it a ``Recovery`` at start. The other
direction, what the engine needs from storage, is the engine's port
(``engine.ports.StoragePort``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .records import Header, Record
from .state_rows import DormantStates

StreamState = dict[str, Any]
"""One stream's (or bucket's) state as stored in a Delta ``state`` row (JSON object)."""


class StateView(Protocol):
    """What storage needs from the engine: state snapshots and progress callbacks."""

    def snapshot_states(self, uids: set[int]) -> dict[int, StreamState]: ...

    def on_durable(self, lsn: int) -> None: ...

    def on_flushed(self, states: Mapping[int, StreamState]) -> None: ...

    def retention_plan(self) -> dict[int, int]:
        """uid -> first retained seq, for streams whose older messages nothing reads."""
        ...

    async def advance_retention(self) -> None:
        """Move retention policies' points before a maintenance pass (durable on return)."""
        ...


@dataclass(frozen=True, slots=True)
class Recovery:
    """The newest Delta state of every uid, and the WAL records after the Delta commit;
    ``subscriptions``: the newest Delta state of every subscription (``None``: deleted)
    and of the signing keys (uid 0); ``dormant``: the live streams whose states are left
    unparsed until first used (``state_rows``), not in ``states``."""

    states: dict[int, StreamState]
    records: list[Record[Header]]
    subscriptions: dict[int, dict[str, Any] | None] = field(default_factory=dict)
    dormant: DormantStates = field(default_factory=DormantStates.empty)
