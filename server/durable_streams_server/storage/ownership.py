"""Who may write a storage location: ownership epochs, fenced by the Delta log itself.

Storage decision
----------------
A server writes a storage location only while it owns it, and ownership is an **epoch**
recorded in the table as a Delta application transaction (``txn`` action, app id
``OWNER_APP_ID``, version = the epoch). Claiming the location is a commit that raises that
version by one; every later commit of the owner -- flushes, state checkpoints, compaction
rewrites, purges, vacuums, table property changes -- carries the same ``txn`` with its own
epoch. Two guarantees follow, one from our code and one from Delta's:

* **The snapshot check.** Before every commit the owner reads the epoch in the snapshot it
  commits on; a higher one means a newer owner, and the commit is not made (``Fenced``).
  Delta accepts a *lower* version for an app id from a fresh snapshot, so this check is not
  optional. It reads the epoch the snapshot's ``OWNER_KEY`` property names (set by every
  claim in the claim's commit, below): no request, whatever the length of the log.
* **The conflict check.** A claim that lands after that snapshot was read is a winning
  commit carrying the same app id: delta-rs's conflict checker refuses the owner's commit
  (``Concurrent transaction failed``) instead of rebasing it, and the re-read snapshot then
  shows the newer epoch (``Fenced``). Two servers claiming the same epoch conflict the same
  way, so exactly one of them owns it.

So a stale owner can never commit after a newer owner's claim, and an acknowledgement that
waits for a commit (``--durability delta``) is never given by a stale owner. The claim is an
ordinary Delta commit (put-if-absent of the log entry on every store delta-rs supports), so
no other coordination service is involved.

The claim (and the release) also sets a table property, ``OWNER_KEY``: the owner's node id,
epoch, advertised URL, data directory, host, pid, durability, and whether it is *serving* or
has *released* the location. Any snapshot says who owns the location and whether it let go,
whatever the table's history (``owner_log``); every commit names its owner in its
``commitInfo`` too, for whoever reads the log.

Taking over
-----------
A location another node owns and has not released is not taken silently (``decide``):

* the same node (its ``--node-id``, kept in its data directory) takes it back: a restart,
  whose WAL is right there to replay. "The same" includes the WAL: every data directory gets
  a random id when it is first used (``WAL_ID_FILE``, written and fsynced once) and every
  claim records it (``Owner.wal_id``). The same node id on another data directory (its disk
  lost, a fresh one mounted) is refused like another node while the recorded owner ran with
  ``--durability wal`` and has not released the location (``lost_wal``): the records it
  acknowledged and had not flushed were on the directory that is gone, and taking the
  location would drop them silently. The ways out are the other node's: the old data
  directory back, or ``--take-over force`` for that one start, which gives them up and logs
  what it gave up. A delta-durability owner has nothing on disk, so its node id alone
  suffices on any data directory; an owner recorded before WAL ids has none (unknown): its
  node id alone suffices, as it did then. "The same" excludes a *copy* of the directory (a
  cloned disk or image, a restored backup), which carries both ids: every claim also records
  a random id (``Owner.claim``, in a table property of its own: ``CLAIM_KEY``) that the
  directory making it keeps (``wal_binding``), and an owner's claim this directory did not
  make means another copy has claimed since (``copy_of``): refused like another node's start,
  naming that copy;
* another node refuses to start (``OwnedElsewhere``, naming the owner and how to take over),
  unless told to take over. Then it asks the owner to hand over: a commit carrying app id
  ``HANDOVER_APP_ID`` at the owner's epoch (a different app id: it never conflicts with the
  owner's commits). The owner notices within a poll interval, refuses new writes, flushes
  everything acknowledged into Delta, and commits its release; only then does the new node
  claim the next epoch, so it serves nothing until the previous owner's acknowledged records
  are in Delta. An owner that does not answer within the timeout is taken over only if
  nothing it acknowledged can be outside Delta (it ran with ``--durability delta``) or the
  operator forces it (``take_over="force"``: the old node's WAL, if it held records, is given
  up, and the new owner logs that it did so).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import asdict, dataclass, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, Literal

from .durability import Durability
from .local_sync import replace_durably

OWNER_APP_ID = "durable-streams-owner"
"""The app id of the ownership epoch (``txn`` version = epoch)."""
HANDOVER_APP_ID = "durable-streams-handover"
"""The app id of a request to hand over (``txn`` version = the epoch asked to let go)."""
OWNER_KEY = "durable_streams.owner"
CLAIM_KEY = "durable_streams.owner_claim"
"""Table property: ``<epoch>:<claim id>`` of the newest claim that made one (``Owner.claim``);
read only beside an owner of that epoch (a claim without an id leaves an older one behind)."""
"""Table property (and ``commitInfo`` key): the JSON of the ``Owner``."""
HANDOVER_KEY = "durable_streams.handover"
"""``commitInfo`` key of a handover request: the JSON of the ``Owner`` asking."""
NODE_ID_FILE = "node-id"
"""In the data directory: the node id a server uses when none is given."""
WAL_ID_FILE = "wal-id"
"""In the data directory: the identity of the write-ahead log it holds (made once, with it)."""

TakeOver = Literal["no", "ask", "force"]
OwnerState = Literal["serving", "releasing", "released"]


@dataclass(frozen=True, slots=True)
class Owner:
    """A node's claim on a storage location, as every commit of it records."""

    node_id: str
    epoch: int
    url: str
    data_dir: str
    host: str
    pid: int
    durability: Durability
    state: OwnerState = "serving"
    wal_id: str | None = None
    """The WAL identity of its data directory (``WAL_ID_FILE``). ``None``: unknown, an owner
    recorded before WAL ids (or by a tool without a data directory), which ``decide`` treats
    as it did before them: the same node id is taken for the same data directory."""
    claim: str | None = None
    """A random id the claim made (``Node.claim``), which the data directory that made it keeps
    (``wal_binding``): a copy of that directory (a clone, a restore) made before the claim does
    not know it (``copy_of``). ``None``: a claim before these ids, or without a WAL."""

    def to_json(self) -> str:
        """Its JSON, the claim id left out: it has a property of its own (``CLAIM_KEY``), so that a
        release without claim ids still reads an owner this one names (there an unknown field
        fails it; ``from_json`` leaves such fields out)."""
        fields = asdict(self)
        del fields["claim"]
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Owner | None:
        """The owner ``text`` names; the fields this version does not know (a newer server's) are
        left out: read as no owner, it would be claimed at once, fencing a newer server that may
        hold acknowledged records in its WAL. ``None``: not an owner's JSON."""
        try:
            found: dict[str, Any] = json.loads(text)
            known = {name: found[name] for name in _OWNER_FIELDS if name in found}
            known["durability"] = Durability.recorded(known.get("durability"))
            return cls(**known)
        except (TypeError, ValueError):
            return None

    def describe(self) -> str:
        where = f" at {self.url}" if self.url else ""
        at = f"host {self.host}, pid {self.pid}, data dir {self.data_dir}, epoch {self.epoch}"
        return f"node {self.node_id!r}{where} ({at})"


_OWNER_FIELDS = tuple(field.name for field in dataclass_fields(Owner))


@dataclass(frozen=True, slots=True)
class Node:
    """This server, as it will claim a location."""

    node_id: str
    url: str = ""
    data_dir: str = ""
    durability: Durability = Durability.WAL
    wal_id: str = ""
    """Its data directory's WAL identity (``wal_id_for``); empty: none (tools, tests)."""
    claim: str = ""
    """The id this start's claim records (``Owner.claim``); empty: none."""
    claims: tuple[str, ...] | None = None
    """The claim ids its data directory made on the location (``wal_binding``); ``None``: unknown."""
    take_over: TakeOver = "no"
    take_over_timeout_s: float = 30.0
    poll_interval_s: float = 1.0
    """How often an owner looks for a handover request (and a requester for the release)."""

    def owner(self, epoch: int, state: OwnerState = "serving") -> Owner:
        return Owner(
            node_id=self.node_id,
            epoch=epoch,
            url=self.url,
            data_dir=self.data_dir,
            host=socket.gethostname(),
            pid=os.getpid(),
            durability=self.durability,
            state=state,
            wal_id=self.wal_id or None,
            claim=self.claim or None,
        )


def node_id_for(data_dir: Path, given: str | None) -> str:
    """``given``, or the id kept in ``data_dir`` (made once, so a restart is the same node)."""
    return given or _kept_id(data_dir / NODE_ID_FILE, 12)


def wal_id_for(data_dir: Path) -> str:
    """The identity of ``data_dir``'s write-ahead log: made when the directory is first used,
    then kept as long as the directory (a restart on it is a restart with its WAL)."""
    return _kept_id(data_dir / WAL_ID_FILE, 32)


def _kept_id(path: Path, length: int) -> str:
    """The id in ``path``; made at random if there is none, written and fsynced (file and
    directory) before it is used, so that a crash cannot change it afterwards."""
    try:
        kept = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        kept = ""
    if kept:
        return kept
    made = uuid.uuid4().hex[:length]
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_durably(path, made + "\n")
    return made


class OwnershipError(RuntimeError):
    """This server may not write the storage location (a start refused, or fenced later)."""

    def __init__(self, message: str, owner: Owner | None = None) -> None:
        super().__init__(message)
        self.owner = owner


class OwnedElsewhere(OwnershipError):
    """Another node owns the location and has not released it: the start is refused."""


class Fenced(OwnershipError):
    """A newer owner claimed the location: this server's commits are refused."""


Decision = Literal["claim", "ask", "force", "refuse"]


def decide(node: Node, epoch: int, current: Owner | None) -> Decision:
    """What ``node`` does at start with a location at ``epoch`` whose newest owner is ``current``."""
    if epoch == 0 or current is None or current.state == "released" or restart_of(node, current):
        return "claim"  # (never owned, or owned by a release before epochs, or let go, or ours)
    if node.take_over == "force":
        return "force"
    return "ask" if node.take_over == "ask" else "refuse"


def same_wal(node: Node, owner: Owner) -> bool:
    """Whether ``owner`` wrote the WAL of ``node``'s data directory: the same node id, the
    same WAL id where both are known (see ``Owner.wal_id``: unknown counts as the same), and
    not a copy of that directory (``copy_of``)."""
    if owner.node_id != node.node_id or copy_of(node, owner):
        return False
    return owner.wal_id is None or not node.wal_id or owner.wal_id == node.wal_id


def copy_of(node: Node, owner: Owner) -> bool:
    """``owner`` is another copy of ``node``'s data directory: its node id and WAL id, and a claim
    this directory did not make. A copy (a cloned disk, a restored backup, ``cp -a``) carries both
    ids, so only the claims tell it from a restart of the directory that claimed last: the copy
    that did claim has since acknowledged records this one has not, under offsets this one's WAL
    may use for others."""
    return (
        owner.node_id == node.node_id
        and owner.wal_id is not None
        and owner.wal_id == node.wal_id
        and owner.claim is not None
        and node.claims is not None
        and owner.claim not in node.claims
    )


def lost_wal(node: Node, owner: Owner) -> bool:
    """``owner`` is ``node`` on another data directory, whose WAL may hold records it
    acknowledged (it ran with WAL durability) that this one does not."""
    return owner.node_id == node.node_id and owner.durability == Durability.WAL and not same_wal(node, owner)


def restart_of(node: Node, owner: Owner) -> bool:
    """``node`` may take ``owner``'s location back as its own: its node id, and nothing of
    ``owner``'s left behind on another data directory (``lost_wal``)."""
    return owner.node_id == node.node_id and not lost_wal(node, owner)


def refusal(current: Owner, storage_uri: str) -> OwnedElsewhere:
    return OwnedElsewhere(
        f"storage {storage_uri} is owned by {current.describe()}, which has not released it. "
        "Stop that server (it releases the location on a clean shutdown), or start this one with "
        "--take-over to ask it to hand over (it flushes what it acknowledged, then lets go); "
        "--take-over force takes the location even if that server does not answer, giving up any "
        "acknowledged records its write-ahead log holds that are not yet in Delta.",
        current,
    )


def wal_lost_refusal(node: Node, current: Owner, storage_uri: str) -> OwnedElsewhere:
    return OwnedElsewhere(
        f"storage {storage_uri} is owned by this node ({node.node_id!r}) with another write-ahead log: "
        f"{current.describe()}, WAL id {current.wal_id}, ran with WAL durability and has not released it, "
        f"but this data dir ({node.data_dir}) holds WAL id {node.wal_id}. The records that node acknowledged "
        "and had not flushed into Delta are in the WAL of that data dir only. Start with that data dir "
        f"({current.data_dir} on {current.host}) to replay them; if it is lost, start with --take-over force "
        "to give them up for this start (the records in Delta are kept).",
        current,
    )


def copy_refusal(node: Node, current: Owner, storage_uri: str) -> OwnedElsewhere:
    return OwnedElsewhere(
        f"storage {storage_uri} was claimed by another copy of this data dir ({node.data_dir}): "
        f"{current.describe()}, with this node id and WAL id, made a claim this directory did not make. "
        "This directory is a copy (a cloned disk, a restored backup) or the original of a copy that "
        "has run since: what that copy acknowledged is not in this WAL, and what this WAL holds may "
        "reuse its offsets. Nothing was changed. Start the copy that claimed it (its data dir above) or, "
        "to serve from this machine, start here with a fresh --data-dir (and --take-over if that copy "
        "still runs); keep this directory aside.",
        current,
    )


def handover_timed_out(current: Owner, waited_s: float) -> OwnedElsewhere:
    return OwnedElsewhere(
        f"{current.describe()} did not hand over within {waited_s:g} s, and it runs with WAL "
        "durability: records it acknowledged may be only in its write-ahead log. Start a server with "
        f"its data dir ({current.data_dir} on {current.host}) to replay them, or, if that disk is "
        "lost, start with --take-over force.",
        current,
    )


def newer_owner(current: Owner | None, epoch: int) -> Fenced:
    who = current.describe() if current is not None else f"another node (epoch {epoch})"
    return Fenced(f"this server no longer owns its storage: {who} took it over", current)


def released(owner: Owner) -> Owner:
    return replace(owner, state="released")


def stale_wal(node: Node, current: Owner) -> OwnershipError:
    if current.wal_id is not None and current.wal_id == node.wal_id and current.node_id != node.node_id:
        return OwnershipError(  # (this WAL is the owner's: only the node id given differs)
            f"the write-ahead log in {node.data_dir} was written by {current.describe()}, which owns the "
            f"storage, but this server runs as node {node.node_id!r} (--node-id). Nothing was changed. Start "
            f"it with --node-id {current.node_id} to replay the log as the node that wrote it.",
            current,
        )
    return OwnershipError(
        f"the write-ahead log in {node.data_dir} holds records this node wrote while it owned the storage, "
        f"but {current.describe()} has owned it since: they were acknowledged and may not be in Delta, and "
        "replaying them now would write them after that node's records. Nothing was changed. Move the "
        "data dir's 'wal' folder aside (keep it: it is what this node acknowledged) and start again.",
        current,
    )
