"""Which Delta table a data directory's write-ahead log belongs to.

Storage decision
----------------
A WAL's records are writes acknowledged *for one table*: their LSNs continue that table's,
their uids are its streams'. Replayed into another table they are flushed there and trimmed
from the WAL, and the table they were acknowledged for never gets them: its streams go on
from older tails, handing out again the offsets readers were given. A server restarted after a
crash with another ``--storage-uri`` (a forgotten flag, a variable this shell does not set, a
typo) would do exactly that if nothing said which table the WAL is for: ownership lets a table
nobody has owned yet be claimed at once.

So the data directory names its WAL's table: ``wal-table`` holds the table's URI and its Delta
id (``metaData.id``: made when the table is created, so a table recreated at the same URI has
another). A start whose WAL holds records checks it before it claims or changes anything, and
refuses (``WalOfAnotherTable``) when it names another table, or, where no file says (a data dir
from before it), when no server has written the table yet (never owned, no commit): then the
records cannot be its. No ``--take-over force`` here, as for a stale WAL
(``ownership.stale_wal``): the way out is the right ``--storage-uri``, or the WAL moved aside
by hand. The same start refuses a WAL that goes on from past its table's last commit
(``check_follows``: a table restored from an older copy lacks records the WAL let go once they
were committed).

The file also keeps the ids of the claims this directory made on the table (``Owner.claim``):
written with the id of a claim before it is made (so a crash between the two cannot make the
directory a stranger to its own claim), and with that id alone once it is made. A copy of the
directory (a cloned disk, a restored backup) has the node id and WAL id ownership knows a
restart by, but not the claims a copy that ran since made: ``ownership.copy_of``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .local_sync import fsync_path
from .ownership import OwnershipError

TABLE_FILE = "wal-table"
"""In the data directory (beside ``wal-id``: the WAL's directory is written by the sync thread
alone): the table the WAL's records are for, and the claims this data directory made on it
(JSON: ``uri``, ``id``, ``claims``)."""


class WalOfAnotherTable(OwnershipError):
    """The WAL holds records acknowledged for another table: the start is refused."""


@dataclass(frozen=True, slots=True)
class Table:
    """A Delta table as a WAL names it."""

    uri: str
    id: str


def bound_table(data_dir: Path) -> Table | None:
    """The table ``data_dir``'s WAL records are for (``None``: no file says)."""
    try:
        found = json.loads((data_dir / TABLE_FILE).read_text(encoding="utf-8"))
        return Table(str(found["uri"]), str(found["id"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise WalOfAnotherTable(f"cannot read {data_dir / TABLE_FILE}: {error}") from None


def check(data_dir: Path, table: Table, records: int, lsns: tuple[int, int], *, written: bool) -> None:
    """Refuse to replay ``records`` WAL records (LSNs ``lsns``) into ``table`` if they are not its:
    the data dir names another table, or names none and no server has ``written`` ``table``."""
    if not records:
        return
    bound = bound_table(data_dir)
    if bound is not None and bound.id == table.id:
        return
    if bound is None and written:
        return  # (a data dir from before the file, on a table it wrote: its restart, as before)
    held = f"{records} records (LSNs {lsns[0]}-{lsns[1]})"
    if bound is not None:
        whose = f"acknowledged for the table at {bound.uri} (id {bound.id})"
    else:
        whose = "acknowledged for another table (the one this data dir was last started with: see its log)"
    raise WalOfAnotherTable(
        f"the write-ahead log in {data_dir / 'wal'} holds {held} {whose}, but --storage-uri names the table at "
        f"{table.uri} (id {table.id}){'' if written else ', which no server has written yet'}. Replayed here they "
        "would be missing from the table they were acknowledged for. Nothing was replayed or claimed. Start with that "
        "table's --storage-uri to replay them; to give them up, move the 'wal' folder aside (keep it) and "
        "start again."
    )


def check_follows(data_dir: Path, table: Table, committed: int, first_lsn: int | None, *, written: bool) -> None:
    """Refuse a WAL of ``table``'s that goes on from ``first_lsn`` where the table's commits
    reach only ``committed``: the records between were committed to it (the WAL let them go
    only then) and are missing from it now, restored from an older copy, and their offsets
    would be handed out again. (A WAL of another table, empty, starts this one's LSNs afresh.)"""
    bound = bound_table(data_dir)
    ours = bound.id == table.id if bound is not None else written
    if not ours or first_lsn is None or first_lsn <= committed + 1:
        return
    raise WalOfAnotherTable(
        f"the table at {table.uri} (id {table.id}) holds records up to LSN {committed}, but the write-ahead "
        f"log in {data_dir / 'wal'} goes on from LSN {first_lsn}: the records {committed + 1}-{first_lsn - 1} were "
        "committed to this table and are not in it now (a copy restored from before them?). Serving it would "
        "hand their offsets out again. Nothing was replayed or claimed. Start on the table that holds them; "
        "to serve this one as it is, move the 'wal' folder aside (keep it) and start again."
    )


def claims_on(data_dir: Path, table: Table) -> tuple[str, ...] | None:
    """The claim ids this data directory made on ``table``, oldest first (``ownership.copy_of``);
    ``None``: unknown (no file, another table's, or one from before claim ids)."""
    try:
        found = json.loads((data_dir / TABLE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise WalOfAnotherTable(f"cannot read {data_dir / TABLE_FILE}: {error}") from None
    claims = found.get("claims") if isinstance(found, dict) and found.get("id") == table.id else None
    return tuple(str(claim) for claim in claims) if isinstance(claims, list) else None


def bind(data_dir: Path, table: Table, claims: tuple[str, ...] = ()) -> None:
    """Name ``table`` as the one ``data_dir``'s WAL records are for, with the ids of the claims this
    data directory made on it (``claims``: the last one made, and one being made), written and
    fsynced before the claim they name is made."""
    path, partial = data_dir / TABLE_FILE, data_dir / (TABLE_FILE + ".tmp")
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(json.dumps({"uri": table.uri, "id": table.id, "claims": list(claims)}) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    fsync_path(data_dir)
