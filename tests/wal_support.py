"""What a WAL directory holds on disk, read the way a replay reads it."""

from __future__ import annotations

from pathlib import Path

from durable_streams_server.storage.records import decode_frames


def records_on_disk(directory: Path) -> int:
    """Bytes of the segments' records (a segment being written has preallocated zeros after them)."""
    total = 0
    for path in directory.glob("*.wal"):
        end = 0
        for _, end in decode_frames(path.read_bytes()):  # noqa: B007 - read after the loop
            pass
        total += end
    return total
