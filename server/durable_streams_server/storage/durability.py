"""Where an acknowledged record is when it is acknowledged: the server's durability mode.

``WAL``: in the write-ahead log on this data directory's disk (group-committed, fsync'd), and
in Delta after the next flush; a node's WAL holds records nothing else has, so its storage is
never taken from it without proof it released them (``ownership``). ``DELTA``: committed to the
Delta table (no WAL): nothing acknowledged is on this machine alone.
"""

from __future__ import annotations

from enum import StrEnum


class Durability(StrEnum):
    WAL = "wal"
    DELTA = "delta"

    @classmethod
    def recorded(cls, value: str | None) -> Durability:
        """The mode an owner or lease record names; one this version does not know (a newer
        server's) counts as ``WAL``: the mode whose storage is never taken without proof."""
        try:
            return cls(value or "")
        except ValueError:
            return cls.WAL
