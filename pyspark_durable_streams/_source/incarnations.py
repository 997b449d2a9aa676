"""Stream incarnations in the source's Spark offsets: pure functions, no I/O.

A stream path can be deleted and created again; the new stream's offsets start over, so an
offset of the old one means nothing in the new one. Our server names each incarnation with
the ``Stream-Incarnation`` header (HEAD, reads, bucket listings), and the source keeps it in
its Spark offset, per stream:

* ``{"offset": "<protocol offset>", "incarnation": "<token>"}`` where the server sends one;
* ``"<protocol offset>"`` (a bare string) where it does not, and in checkpoints written
  before incarnations were kept. Both forms load; a bare string means "incarnation
  unknown", and the only re-creation then detectable is a tail below the checkpointed
  offset (a stream re-created and grown past that offset between two looks is not).

A stream whose incarnation differs from the checkpoint's (or whose tail went below the
checkpointed offset) is a *new incarnation*: the rest of the old one is lost to the query.
With ``failOnDataLoss=true`` that fails the query; with ``false`` the new incarnation is read
from its beginning (``range_start``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .offsets import EARLIEST
from .schema_record import SCHEMA_KEY

SparkOffset = dict[str, Any]
"""A Spark offset of the source as JSON: stream key → offset string or ``{"offset", "incarnation"}``."""


def decode(spark: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(protocol offsets, known incarnations) of a Spark offset, in either per-stream form (the
    schema record, ``schema_record``, is not a stream's)."""
    offsets: dict[str, str] = {}
    incarnations: dict[str, str] = {}
    for key, value in spark.items():
        if key == SCHEMA_KEY:
            continue
        if isinstance(value, str):
            offsets[key] = value
        elif isinstance(value, Mapping) and isinstance(value.get("offset"), str):
            offsets[key] = value["offset"]
            if isinstance(value.get("incarnation"), str):
                incarnations[key] = value["incarnation"]
        else:
            raise ValueError(
                f"durable_streams: the offset of stream {key!r} is {value!r}: expected an offset string or "
                '{"offset": ..., "incarnation": ...}'
            )
    return offsets, incarnations


def encode(offsets: Mapping[str, str], incarnations: Mapping[str, str]) -> SparkOffset:
    """The Spark offset (keys sorted: Spark compares offsets by their JSON text)."""
    return {
        key: {"offset": offsets[key], "incarnation": incarnations[key]} if key in incarnations else offsets[key]
        for key in sorted(offsets)
    }


def new_incarnation(offset: str, known: str | None, tail: str, current: str | None) -> str | None:
    """Why the stream now is another incarnation than the one ``offset`` belongs to, or None."""
    if known is not None and current is not None:
        return f"its incarnation changed from {known} to {current}" if known != current else None
    if offset != EARLIEST and tail < offset:
        return f"its tail {tail} is below the offset {offset} already read"
    return None


def range_start(
    key: str, start: tuple[dict[str, str], dict[str, str]], end: tuple[dict[str, str], dict[str, str]]
) -> str:
    """Where a batch from ``start`` to ``end`` begins reading stream ``key``: its start offset,
    or the beginning when ``end`` belongs to a new incarnation."""
    (start_offsets, start_incarnations), (end_offsets, end_incarnations) = start, end
    first = start_offsets.get(key, EARLIEST)
    known, current = start_incarnations.get(key), end_incarnations.get(key)
    if known is not None and current is not None:
        return first if known == current else EARLIEST
    return first if end_offsets[key] >= first else EARLIEST


def recreated_message(key: str, offset: str, known: str | None, current: str | None, reason: str) -> str:
    return (
        f"stream {key} was deleted and created again ({reason}; incarnation read so far: {known or 'unknown'}, "
        f"now: {current or 'unknown'}): the messages of the old incarnation after offset {offset} that this "
        f"query had not read are lost to it, and the new incarnation's offsets start over. Set option "
        f"failOnDataLoss=false to read the new incarnation from its beginning, or restart the query with a new "
        f"checkpoint"
    )


def deleted_message(key: str, offset: str, known: str | None, cause: str) -> str:
    return (
        f"stream {key} was deleted (incarnation {known or 'unknown'}, read up to offset {offset}): {cause}. "
        f"Set option failOnDataLoss=false to keep the query running without it (it is read from "
        f"its beginning if it is created again), or remove it from the query"
    )
