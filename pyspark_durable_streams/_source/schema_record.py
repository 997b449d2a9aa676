"""The schema a streaming query was started with, kept in its checkpoint, and what a restart
may change (pure functions, no I/O).

Every Spark offset of the source carries, beside the streams' offsets, the query's schema
under the key ``""`` (no stream key is empty: stream URLs and stream ids never are), as
``{"schema": [[column, Spark type], ...]}`` in column order. The ``value`` column's type is
there too, so ``valueType`` (and the content types it is inferred from) is part of it.

A restarted query compares its schema with the checkpoint's before it plans a batch:

* compatible: the same columns, or new columns added (user columns are parsed from each
  JSON message and are null where a message lacks them, so earlier batches' rows simply
  did not have them); the order of columns may change;
* incompatible, failing the query with a message naming what changed: a column removed, a
  column's type changed, and in particular the ``value`` column's type (``valueType``
  binary vs string/json), which would change what every later row holds.

Checkpoints written without the record are accepted as they are (and get one from their
next batch on).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

SCHEMA_KEY = ""
"""The key of the schema record in the source's Spark offsets (never a stream's key)."""


class SchemaChanged(RuntimeError):
    """A restarted query declares a schema its checkpoint's batches cannot continue."""


def schema_record(schema: StructType) -> dict[str, Any]:
    return {"schema": [[field.name, field.dataType.simpleString()] for field in schema.fields]}


def check_schema(recorded: Any, schema: StructType) -> None:
    """Raise ``SchemaChanged`` unless ``schema`` may continue a checkpoint that recorded
    ``recorded`` (``None``: a checkpoint from before records, accepted)."""
    if recorded is None:
        return
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("schema"), list):
        raise SchemaChanged(f"durable_streams: the checkpoint's schema record is malformed: {recorded!r}")
    before = {str(name): str(kind) for name, kind in recorded["schema"]}
    now = {field.name: field.dataType.simpleString() for field in schema.fields}
    changes = [f"column '{name}' ({kind}) was removed" for name, kind in before.items() if name not in now]
    changes += [
        f"column '{name}' changed from {kind} to {now[name]}"
        + (" (option valueType, or the streams' content type it is inferred from)" if name == "value" else "")
        for name, kind in before.items()
        if name in now and now[name] != kind
    ]
    if changes:
        raise SchemaChanged(
            "durable_streams: this query's checkpoint was written with another schema: "
            + "; ".join(changes)
            + ". A restarted query may add columns but not remove one or change a type (nor valueType); "
            "restore the schema the checkpoint was written with, or start the query with a new checkpoint"
        )
