"""Which Delta table each shard's location holds, recorded once for the whole cluster.

Storage decision
----------------
A single server refuses to start where the table its data directory served is missing from
its URI (``storage.wal_binding.check_present``): a volume not mounted, a prefix deleted or
renamed, the same URI on another store. A cluster node taking a shard it never held has no
such file for it: its server would make a new table there and serve every stream of the shard
as never created, handing their offsets out again, and acknowledge appends that vanish once
the table is back. So the table each shard's location holds is recorded in the cluster's
storage, ``_cluster/tables/<kkkk>.json`` (its URI and Delta id), written once (put-if-absent)
by the first node whose server serves the shard, from what that server's data directory names
(``wal_binding.named_at``). Before a node takes a shard's lease it names the recorded table
in its data directory for that shard (``wal_binding.expect``), so its server refuses a start
where the table is not, as a single server does; the node starts it a few times, then lets
the lease go (``workers.START_ATTEMPTS``), and so does every node after it: the shard stays
unavailable, each refusal logged, until the table is back, and then it is served whole. To
give a shard's table up on purpose: remove its record, and the ``wal-table`` files naming it
in the nodes' data directories for that shard (the refusal names both).
"""

from __future__ import annotations

import json
import logging

from ...storage import wal_binding
from ...storage.delta_log import table_uri
from ...storage.wal_binding import Table
from .objects import ConditionalObjects, ObjectStoreError
from .shards import Layout, table_key
from .workers import ShardServerSpec

log = logging.getLogger("durable_streams_server.cluster")


class ShardTables:
    """The cluster's records of its shards' tables, as one node reads and writes them."""

    def __init__(self, objects: ConditionalObjects, layout: Layout, root: str, spec: ShardServerSpec) -> None:
        self._objects = objects
        self._layout = layout
        self._root = root
        self._spec = spec
        self._recorded: set[int] = set()
        """Shards whose record this node has seen in the store (none is ever rewritten)."""

    def expect(self, shard: int) -> bool:
        """Before ``shard``'s lease is taken: name its recorded table in this node's data
        directory for it. ``False``: the record is unreadable, so the lease is not taken (its
        table is unknown: logged, as an unreadable lease is). A store that fails raises
        ``ObjectStoreError``: the lease is not taken this tick."""
        found = self._objects.get(table_key(shard))
        if found is None:
            return True
        try:
            table = Table(**{key: str(json.loads(found.body)[key]) for key in ("uri", "id")})
        except (ValueError, TypeError, KeyError) as exc:
            unreadable = {"shard": shard, "error": str(exc)}
            log.error("shard table record unreadable: the shard is not taken", extra=unreadable)
            return False
        self._recorded.add(shard)
        if wal_binding.expect(self._spec.shard_data_dir(shard), table, self._where(shard)):
            log.info("shard table expected", extra={"shard": shard, "table_id": table.id})
        return True

    def record(self, shard: int) -> None:
        """Once ``shard``'s server serves: record the table its data directory names at the
        shard's location, unless one is recorded. A store that fails is logged; the shard's
        next start here tries again."""
        if shard in self._recorded:
            return
        location = table_uri(self._layout.shard_uri(self._root, shard))
        table = wal_binding.named_at(self._spec.shard_data_dir(shard), location)
        if table is None:
            return
        try:
            made = self._objects.create(table_key(shard), json.dumps({"uri": table.uri, "id": table.id}).encode())
        except ObjectStoreError as exc:
            log.warning("shard table not recorded", extra={"shard": shard, "error": str(exc)})
            return
        self._recorded.add(shard)
        if made is not None:
            log.info("shard table recorded", extra={"shard": shard, "table_id": table.id})

    def _where(self, shard: int) -> str:
        return f"{self._root.rstrip('/')}/{table_key(shard)}"
