"""The start of a query's first batch, kept in that batch's end offset (pure functions, no I/O).

Spark keeps a micro-batch source's *end* offsets in its offset log, and each batch's start is
the previous batch's end, except for the first batch: its start is the source's
``initialOffset``, which Spark does not keep. When a query stops after logging its first
batch but before committing it, the restart replays that batch from a start Spark asks for
again, and where the start depends on when it is asked (``startingOffsets=latest`` or
``snapshot``, a time after every message) the replay would read another range than the
first run (or nothing). So the first batch's end carries its start in the schema record
(``schema_record``, under ``"first_start"``: the record is not a stream's, and readers that
do not know the key ignore it), and planning a batch whose end carries one starts there,
whatever start Spark passes. Later batches' ends do not carry it: their starts are logged
ends already, even where one reads as the initial offset (``latest`` with nothing new since:
carrying it there would make every end differ from its start, and Spark would run empty
batches without end).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .schema_record import SCHEMA_KEY

FIRST_START = "first_start"


def with_first_start(end: Mapping[str, Any], start: Mapping[str, Any]) -> dict[str, Any]:
    """``end`` (a Spark offset with a schema record) carrying ``start`` as its batch's start."""
    record = end.get(SCHEMA_KEY)
    streams = {key: value for key, value in start.items() if key != SCHEMA_KEY}
    return {**end, SCHEMA_KEY: {**(record if isinstance(record, Mapping) else {}), FIRST_START: streams}}


def batch_start(start: Mapping[str, Any], end: Mapping[str, Any]) -> dict[str, Any]:
    """Where the batch ending at ``end`` starts: the start ``end`` carries, else ``start``."""
    record = end.get(SCHEMA_KEY)
    kept = record.get(FIRST_START) if isinstance(record, Mapping) else None
    if not isinstance(kept, Mapping):
        return dict(start)
    return {**({SCHEMA_KEY: start[SCHEMA_KEY]} if SCHEMA_KEY in start else {}), **kept}
