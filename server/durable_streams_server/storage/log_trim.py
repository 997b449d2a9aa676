"""Keeping the Delta log short, so commits and table opens cost the same after a million commits.

delta-rs finds a table's newest version by listing ``_delta_log``: after every commit (to
update the writer's snapshot) and on every open. On a local disk that listing stats every
entry, so with time-based log retention alone each commit costs more the more commits the
retention window holds: the cost follows the log entries, not the data files (the figures:
bench/README.md, "Figures behind design choices").

So the log is trimmed by count, not only by age. delta-rs writes a log checkpoint after
every ``delta.checkpointInterval``-th commit; one commit *before* each checkpoint the writer
runs delta-rs's metadata clean-up, which deletes the entries older than the newest
checkpoint *then*. What stays is two checkpoints and the commits after the older one: at
most two intervals of commit files, whatever the age of the table. Keeping the older
checkpoint leaves a reader that has just read ``_last_checkpoint`` (or a handle a
checkpoint behind) everything it lists. Only versions a checkpoint holds are deleted, so the
table's current state is never touched: what goes is time travel to older versions.

The table sets ``delta.enableExpiredLogCleanup = false`` (delta-rs would otherwise clean up
after writing each checkpoint, down to that checkpoint) and ``delta.logRetentionDuration``
to the configured hours: with ``0`` the clean-up keeps nothing older than the checkpoint;
with more it also keeps every entry younger than that (time travel), and commits cost more
as that window fills (see above).
"""

from __future__ import annotations

from deltalake import DeltaTable


def trim_due(version: int, checkpoint_interval: int) -> bool:
    """Whether the commit of ``version`` is the one before a log checkpoint (delta-rs
    writes one after committing each version ``v`` with ``(v + 1) % interval == 0``)."""
    return (version + 2) % checkpoint_interval == 0


def table_properties(checkpoint_interval: int, log_retention_hours: int) -> dict[str, str]:
    """The Delta table properties the log's upkeep relies on."""
    return {
        "delta.checkpointInterval": str(checkpoint_interval),
        "delta.enableExpiredLogCleanup": "false",
        "delta.logRetentionDuration": f"interval {log_retention_hours} hours",
    }


def trim_log(table: DeltaTable) -> None:
    """Delete the log entries older than the newest checkpoint (and the retention period)."""
    table.cleanup_metadata()
