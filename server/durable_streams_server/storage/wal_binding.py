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
another). A server with ``--durability delta`` names its table there too: it has no WAL, but
the same table can go missing under it. A start whose WAL holds records checks it before it
claims or changes anything, and refuses (``WalOfAnotherTable``) when it names another table,
or, where no file says (a data dir from before it), when no server has written the table yet
(never owned, no commit): then the records cannot be its. No ``--take-over force`` here, as
for a stale WAL (``ownership.stale_wal``): the way out is the right ``--storage-uri``, or the
WAL moved aside by hand. Where no table is at the URI given, the refusal comes before one is
made (``check_creatable``): the records were acknowledged for a table that existed. The same
start refuses a WAL that goes on from past its table's last commit (``check_follows``: a table
restored from an older copy lacks records the WAL let go once they were committed).

The file also keeps the ids of the claims this directory made, per table (``Owner.claim``):
an id is added before its claim is made and none is let go until one is made (so no crash or
failed start can make the directory a stranger to the claim its table names); once made, that
id alone is kept, and only then does the file name the claimed table as the WAL's (a start
refused by its owner leaves the WAL's table as it was). A WAL moving to another table holds no
records (``check``); its leftover empty segments, named by the other table's LSNs, are let go
(``WriteAheadLog.discard_empty``). A copy of the directory (a cloned disk, a restored backup)
has the node id and WAL id ownership knows a restart by, but not the claims a copy that ran
since made: ``ownership.copy_of``.

A table the data directory names can also be missing from its URI at a start, whatever the
WAL holds: a volume that did not mount (the URI then a directory of the root filesystem), a
prefix deleted or renamed, the same URI on another object store (another endpoint or
account). Made afresh there, the table would serve every stream as never created, hand
their offsets out again, and acknowledge appends that vanish under the table once it is
back. So a start where the table named is not (``check_present``: no table, or one of
another id, deleted and made again) is refused before any table is made or claimed; the way
out, for a table given up on purpose, is to remove the file. A data directory that never
served the table (a cluster node taking a shard it never held) is told which table it must
find (``expect``): the file is written naming it, and by what record (``named_by``: the
cluster's, ``cluster.node.shard_tables``), which the refusal names as the way out too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .local_sync import replace_durably
from .ownership import OwnershipError

TABLE_FILE = "wal-table"
"""In the data directory (beside ``wal-id``: the WAL's directory is written by the sync thread
alone): the table the WAL's records are for, and the claims this data directory made on it
(JSON: ``uri``, ``id``, ``claims``)."""


class WalOfAnotherTable(OwnershipError):
    """The WAL holds records acknowledged for another table: the start is refused."""


class TableGone(OwnershipError):
    """The table this data directory served is not at its URI: the start is refused."""


@dataclass(frozen=True, slots=True)
class Table:
    """A Delta table as a WAL names it."""

    uri: str
    id: str


def _read(data_dir: Path) -> dict[str, Any]:
    """The file's JSON (empty: no file); a torn or foreign one refuses the start."""
    try:
        found = json.loads((data_dir / TABLE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise WalOfAnotherTable(f"cannot read {data_dir / TABLE_FILE}: {error}") from None
    if not isinstance(found, dict):
        raise WalOfAnotherTable(f"cannot read {data_dir / TABLE_FILE}: not a JSON object")
    return found


def bound_table(data_dir: Path) -> Table | None:
    """The table ``data_dir``'s WAL records are for (``None``: no file says)."""
    found = _read(data_dir)
    return Table(str(found["uri"]), str(found["id"])) if "id" in found and "uri" in found else None


def check_present(data_dir: Path, uri: str, found: str | None) -> None:
    """Refuse a start on the table at ``uri`` if ``data_dir`` names a table there and ``found``
    (the Delta id of the one there; ``None``: none is, before one is made) is not it."""
    bound = bound_table(data_dir)
    if bound is None or _location(bound.uri) != _location(uri) or bound.id == found:
        return
    there = "no table" if found is None else f"another table (id {found}): the one served was deleted and made again"
    named_by = _read(data_dir).get("named_by")
    whose = f"{named_by} names" if named_by else "this data dir's server wrote"
    remove = f"{named_by} and {data_dir / TABLE_FILE}" if named_by else str(data_dir / TABLE_FILE)
    raise TableGone(
        f"the table {whose} at {uri} (id {bound.id}) is not there: it holds {there}. "
        "Served from here, every stream it held would be missing, their offsets handed out again, and new appends "
        "acknowledged where they would vanish once it is back (a volume not mounted? a prefix deleted or renamed? "
        "the same URI on another store?). Nothing was created or claimed. Start again once the table is back; to "
        f"give it up on purpose, remove {remove} and start again."
    )


def named_at(data_dir: Path, uri: str) -> Table | None:
    """The table ``data_dir`` names at ``uri``'s location (``None``: none, or one elsewhere)."""
    bound = bound_table(data_dir)
    return bound if bound is not None and _location(bound.uri) == _location(uri) else None


def expect(data_dir: Path, table: Table, named_by: str) -> bool:
    """Name ``table`` as the one ``data_dir`` must find at its URI (``check_present``), and
    ``named_by`` as the record that says so, where the file names no table yet or names this
    one (another it names, here or elsewhere, is left: its WAL's records may be that table's).
    Whether the file was written."""
    found, bound = _read(data_dir), bound_table(data_dir)
    if bound is not None and (bound.id != table.id or found.get("named_by") == named_by):
        return False
    data_dir.mkdir(parents=True, exist_ok=True)
    _write(data_dir, {**found, "uri": bound.uri if bound else table.uri, "id": table.id, "named_by": named_by})
    return True


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
    if not table.id:  # (before one is made there: ``check_creatable``)
        given = f"{table.uri}, where no table is"
    else:
        given = f"the table at {table.uri} (id {table.id}){'' if written else ', which no server has written yet'}"
    raise WalOfAnotherTable(
        f"the write-ahead log in {data_dir / 'wal'} holds {held} {whose}, but --storage-uri names {given}. "
        "Replayed here they would be missing from the table they were acknowledged for. Nothing was created, "
        "replayed or claimed. Start with that table's --storage-uri to replay them; to give them up, move the 'wal' "
        "folder aside (keep it) and start again."
    )


def check_creatable(data_dir: Path, uri: str, records: int, lsns: tuple[int, int]) -> None:
    """Before a table is made at ``uri`` (none is there): refuse if ``data_dir`` names the table
    it served there (``check_present``), or if its WAL holds ``records`` (LSNs ``lsns``): they were
    acknowledged for a table that existed, which a new one cannot be (``check``)."""
    check_present(data_dir, uri, None)
    check(data_dir, Table(uri, ""), records, lsns, written=False)


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


def wal_is_for(data_dir: Path, table: Table) -> bool:
    """Whether the records ``data_dir``'s WAL may hold are ``table``'s: the file names it, or
    names no table (a data dir from before the file)."""
    bound = bound_table(data_dir)
    return bound is None or bound.id == table.id


def claims_on(data_dir: Path, table: Table) -> tuple[str, ...] | None:
    """The claim ids this data directory made on ``table``, oldest first (``ownership.copy_of``);
    ``None``: unknown (no file, or none made on ``table`` since the file was kept)."""
    claims = _read(data_dir).get("claims")
    made = claims.get(table.id) if isinstance(claims, dict) else None
    return tuple(str(claim) for claim in made) if isinstance(made, list) else None


def note_claim(data_dir: Path, table: Table, claim: str) -> None:
    """Before claiming ``table``: add ``claim`` to the ids this directory made on it (none let go
    until a claim is made: a start that fails after this must not estrange its directory from
    the claim the table names), the table the WAL's records are for left as it is."""
    found = _read(data_dir)
    kept = found.get("claims")
    claims: dict[str, list[str]] = kept if isinstance(kept, dict) else {}
    _write(data_dir, {**found, "claims": {**claims, table.id: [*claims.get(table.id, []), claim]}})


def bind(data_dir: Path, table: Table, claim: str) -> None:
    """Once ``claim`` on ``table`` is made: ``table`` is the one the WAL's records are for, and
    ``claim`` the one id this directory needs to know its claim by."""
    found = _read(data_dir)
    named_by = {"named_by": found["named_by"]} if "named_by" in found and found.get("id") == table.id else {}
    _write(data_dir, {"uri": table.uri, "id": table.id, "claims": {table.id: [claim]}, **named_by})


def name(data_dir: Path, table: Table, *, wal_holds_records: bool) -> None:
    """``table`` is the one ``data_dir`` serves, for a server without a WAL (no claims to keep;
    those kept for it from a WAL's starts stay). While the data dir's WAL still holds records
    (a WAL server's, left for a later WAL start), the file is left as it is: naming this table
    would make them this table's."""
    found = _read(data_dir)
    if wal_holds_records or (found.get("uri") == table.uri and found.get("id") == table.id):
        return
    _write(data_dir, {**found, "uri": table.uri, "id": table.id})


def _location(uri: str) -> str:
    """``uri`` spelled one way per location: a local path absolute and normalized (with or
    without ``file://``), ``s3a://`` as ``s3://``."""
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    if "://" not in uri:
        return os.path.normpath(os.path.abspath(uri))
    return "s3://" + uri[len("s3a://") :] if uri.startswith("s3a://") else uri


def _write(data_dir: Path, content: dict[str, Any]) -> None:
    """Replace the file with ``content``, written and fsynced (file, then directory) first."""
    replace_durably(data_dir / TABLE_FILE, json.dumps(content) + "\n")
