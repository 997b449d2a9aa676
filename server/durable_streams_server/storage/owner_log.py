"""The ownership epoch in the Delta log: reading it, claiming it, asking for it, letting it go.

The decisions are ``ownership``'s; this module is their I/O on a ``DeltaTable`` handle
(callers hold ``DeltaLog``'s lock). A claim and a release are commits without data files
that set the table property ``OWNER_KEY`` (the owner's JSON) and carry the epoch's ``txn``:
the snapshot itself says who owns the table, with no read of older commits, and as a
metadata change a claim also makes every commit begun on an older snapshot fail, with or
without a ``txn`` (delta-rs: "Metadata changed since last commit"). A handover request is a
commit with its own ``txn`` and nothing else, so it never conflicts with the owner's commits.

Reading the epoch costs no request: it is the epoch of the owner the snapshot's property names
(``epoch_of``), which every claim sets in the same commit as its ``txn``. The ``txn`` itself is
read only where no property names an owner: delta-rs finds an app id's version by fetching the
log's commit files since its last checkpoint (every one of them, concurrently, even when the
newest holds it), so a lookup costs what the log holds. Done before every commit, that made a
commit cost more with each commit since the last checkpoint (bench/README.md, "Delta-durability
commit latency vs commits").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from deltalake import CommitProperties, DeltaTable, Transaction

from .data_dir_lock import running_copy
from .durability import Durability
from .ownership import (
    CLAIM_KEY,
    HANDOVER_APP_ID,
    HANDOVER_KEY,
    OWNER_APP_ID,
    OWNER_KEY,
    Decision,
    Fenced,
    Node,
    Owner,
    copy_of,
    copy_refusal,
    decide,
    handover_timed_out,
    newer_owner,
    refusal,
    restart_of,
    same_wal,
    stale_wal,
    wal_lost_refusal,
)

log = logging.getLogger("durable_streams_server.storage")


def epoch_of(table: DeltaTable) -> int:
    """The snapshot's ownership epoch: its owner property's (no request), else its ``txn``'s."""
    owner = newest_owner(table)
    return owner.epoch if owner is not None else table.transaction_version(OWNER_APP_ID) or 0


def handover_asked(table: DeltaTable) -> int:
    """The epoch the newest handover request asked to let go (0: none). Reads the log's commits
    since its last checkpoint (see above): ``DeltaLog.handover_asked`` asks only after commits
    of other writers."""
    return table.transaction_version(HANDOVER_APP_ID) or 0


def newest_owner(table: DeltaTable) -> Owner | None:
    """The owner the snapshot names (``None``: never claimed)."""
    configuration = table.metadata().configuration
    text = configuration.get(OWNER_KEY)
    owner = Owner.from_json(text) if text else None
    epoch, _, claim = (configuration.get(CLAIM_KEY) or "").partition(":")
    return replace(owner, claim=claim) if owner is not None and claim and epoch == str(owner.epoch) else owner


def owner_properties(owner: Owner, transactions: Iterable[Transaction] = ()) -> CommitProperties:
    """What every commit of ``owner`` carries: its epoch's ``txn`` (fencing) and its name."""
    return CommitProperties(
        custom_metadata={OWNER_KEY: owner.to_json()},
        app_transactions=[Transaction(app_id=OWNER_APP_ID, version=owner.epoch), *transactions],
    )


def check_owner(table: DeltaTable, owner: Owner) -> None:
    """Raise ``Fenced`` if the snapshot ``table`` holds names a newer epoch than ``owner``'s."""
    epoch = epoch_of(table)
    if epoch != owner.epoch:
        raise newer_owner(newest_owner(table), epoch)


def empty_commit(table: DeltaTable, properties: CommitProperties) -> None:
    """A commit of ``properties`` alone (no data files); the handle sees it afterwards."""
    schema: Any = table.schema()
    table.create_write_transaction([], "append", schema, commit_properties=properties)
    table.update_incremental()


def name_owner(table: DeltaTable, owner: Owner) -> None:
    """Commit ``owner`` as the table's owner (its claim, or its release): the table property and
    the epoch's ``txn``; the handle sees it afterwards."""
    claim = {CLAIM_KEY: f"{owner.epoch}:{owner.claim}"} if owner.claim else {}
    table.alter.set_table_properties(
        {OWNER_KEY: owner.to_json(), **claim}, raise_if_not_exists=False, commit_properties=owner_properties(owner)
    )
    table.update_incremental()


def claim(table: DeltaTable, owner: Owner) -> None:
    """Commit ``owner``'s epoch, which must be one above the snapshot's; a concurrent claim of
    the same epoch makes one of the two fail (``Fenced`` for the loser)."""
    try:
        name_owner(table, owner)
    except Exception as error:  # (delta-rs: "Concurrent transaction failed", "Metadata changed")
        table.update_incremental()
        if epoch_of(table) >= owner.epoch:
            raise newer_owner(newest_owner(table), epoch_of(table)) from error
        raise


def ask_handover(table: DeltaTable, asking: Owner, epoch: int) -> None:
    """Ask the owner of ``epoch`` to let go (it never conflicts with the owner's commits)."""
    empty_commit(
        table,
        CommitProperties(
            custom_metadata={HANDOVER_KEY: asking.to_json()},
            app_transactions=[Transaction(app_id=HANDOVER_APP_ID, version=epoch)],
        ),
    )


def fenced_by(table: DeltaTable, owner: Owner, error: Exception) -> Exception:
    """After a failed commit of ``owner``: ``Fenced`` if a newer owner explains it, else ``error``."""
    table.update_incremental()
    try:
        check_owner(table, owner)
    except Fenced as fenced:
        fenced.__cause__ = error
        return fenced
    return error


def claim_table(table: DeltaTable, lock: threading.Lock, uri: str, node: Node, holds_wal: bool) -> Owner:
    """Claim the next epoch of ``table`` for ``node`` (``ownership.decide``): at once when the
    table is free or ``node``'s own, after its owner handed over when asked (``node.take_over``),
    or not at all (``OwnedElsewhere``). ``holds_wal``: ``node``'s data directory holds WAL
    records, which only a restart of the owner that wrote them may replay (``stale_wal``)."""
    with lock:
        table.update_incremental()
        epoch, current = epoch_of(table), newest_owner(table)
    decision = decide(node, epoch, current)
    if current is not None and copy_of(node, current) and (holds_wal or decision == "refuse"):
        raise copy_refusal(node, current, uri)
    running = running_copy(node, current) if current is not None and decision == "claim" else None
    if running is not None:  # (a restart by its ids, but the directory it ran from is in use here)
        raise running
    if current is not None and not same_wal(node, current) and holds_wal:
        raise stale_wal(node, current)
    if decision == "refuse":
        assert current is not None
        raise refusal(current, uri) if current.node_id != node.node_id else wal_lost_refusal(node, current, uri)
    if decision == "ask":
        assert current is not None
        _ask_handover(table, lock, node, epoch, current)
    owner = _claim_next(table, lock, node, epoch)
    if current is not None and current.state != "released" and not restart_of(node, current):
        log.warning(
            "took the storage over",
            extra={"previous_owner": current.describe(), "epoch": owner.epoch, **_given_up(current, decision)},
        )
    return owner


CLAIM_ATTEMPTS = 20
"""Claims tried while commits of the same epoch keep landing first (a previous owner still
running, asked to hand over and not waited for: its last flush and its release)."""


def _claim_next(table: DeltaTable, lock: threading.Lock, node: Node, epoch: int) -> Owner:
    """Claim ``epoch + 1``. A commit of the previous owner's that lands between this snapshot and
    the claim's commit (it is still running: its flush, its release) makes the claim's commit fail
    without a newer owner: the claim is asked again on the newer snapshot, which holds that commit,
    so what the previous owner committed is this owner's history. A newer epoch is ``Fenced``."""
    for attempt in range(CLAIM_ATTEMPTS):
        with lock:
            table.update_incremental()
            if epoch_of(table) != epoch:
                raise newer_owner(newest_owner(table), epoch_of(table))
            owner = node.owner(epoch + 1)
            try:
                claim(table, owner)
                return owner
            except Fenced:
                raise
            except Exception as error:
                if attempt == CLAIM_ATTEMPTS - 1:
                    raise
                log.info("claim met a commit of the previous owner's; claiming again", extra={"error": str(error)})
        time.sleep(min(0.05 * (attempt + 1), node.poll_interval_s))
    raise AssertionError("unreachable")


def _given_up(previous: Owner, decision: Decision) -> dict[str, object]:
    """What taking ``previous``'s location over gave up, for the log: nothing after a handover
    (``previous`` flushed first) or from a delta-durability owner (it acknowledged only commits)."""
    if decision != "force" or previous.durability != Durability.WAL:
        return {}
    return {
        "given_up": "any records that owner acknowledged and had not flushed into Delta: they stay in its "
        f"write-ahead log (data dir {previous.data_dir} on {previous.host}, WAL id {previous.wal_id or 'unknown'}) "
        "and are not in this location",
    }


def _ask_handover(table: DeltaTable, lock: threading.Lock, node: Node, epoch: int, current: Owner) -> None:
    """Ask the owner of ``epoch`` to let go and wait for its release; past the timeout, go on
    only if it cannot hold acknowledged records outside Delta (``--durability delta``)."""
    with lock:
        ask_handover(table, node.owner(epoch, "releasing"), epoch)
    log.info("asked the owner to hand over", extra={"owner": current.describe()})
    until = time.monotonic() + node.take_over_timeout_s
    while time.monotonic() < until:
        time.sleep(node.poll_interval_s)
        with lock:
            table.update_incremental()
            if epoch_of(table) != epoch:
                raise newer_owner(newest_owner(table), epoch_of(table))
            newest = newest_owner(table)
        if newest is not None and newest.epoch == epoch and newest.state == "released":
            return
    if current.durability != Durability.DELTA:
        raise handover_timed_out(current, node.take_over_timeout_s)
