"""Which ``(Producer-Id, Producer-Epoch)`` a write task appends with, derived from what Spark persists.

Streaming writes: Spark runs every micro-batch job with two local properties that reach each
task (``TaskContext.getLocalProperty``): ``sql.streaming.queryId`` (``StreamingQuery.id``,
stored in the checkpoint's ``metadata`` file, hence the same after a restart from the same
checkpoint) and ``streaming.sql.batchId`` (the micro-batch id, stored in the checkpoint's
offset log, hence the same when a batch is re-run after a crash). The task's partition id is
a deterministic function of the batch's plan. So

    Producer-Id    = "spark-query:{query id}:{partition id}"
    Producer-Epoch = batch id
    Producer-Seq   = 0, 1, 2 … per request, per target stream, restarting in every (partition, batch)

A retried task, a speculative copy and a re-run of the batch after a restart all send the same
triples. Batch ids only grow, so epochs never decrease per Producer-Id (spec 5.2.1): a new
batch opens a new epoch at seq 0; a re-run of the same batch stays in its epoch and its
requests that were stored already are answered ``204`` (duplicate).

Batch writes (``df.write``): a fresh random identity per job (epoch 0), unless the option
``producerId`` is given (then ``"{producerId}:{partition id}"``, epoch ``producerEpoch`` or 0),
which makes a re-run of the same job with the same input a no-op on the server.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass

from ..options import OptionError, WriteOptions

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


class IdentityError(RuntimeError):
    """The producer identity of a write task cannot be derived."""


@dataclass(frozen=True)
class JobIdentity:
    """Decided on the driver when the writer is made; completed per task by ``task_identity``."""

    streaming: bool
    base: str | None
    """Producer-Id prefix known on the driver (explicit ``producerId``, the checkpoint's query id,
    or a batch job's random id); None when it is read from the task's local properties."""
    epoch: int | None
    """Fixed epoch (batch writes); None: the micro-batch id, read per task."""
    explicit: bool = False
    """``base`` came from the option ``producerId``: it wins over the task's query id."""


def job_identity(options: WriteOptions, *, streaming: bool) -> JobIdentity:
    if streaming:
        if options.producer_epoch is not None:
            raise OptionError("option 'producerEpoch' applies to batch writes; streaming writes use the batch id")
        if options.producer_id is not None:
            return JobIdentity(True, options.producer_id, None, explicit=True)
        query_id = _query_id_from_checkpoint(options.checkpoint_location)
        return JobIdentity(True, f"spark-query:{query_id}" if query_id else None, None)
    if options.producer_id is not None:
        return JobIdentity(False, options.producer_id, options.producer_epoch or 0, explicit=True)
    if options.producer_epoch is not None:
        raise OptionError("option 'producerEpoch' needs option 'producerId'")
    return JobIdentity(False, f"spark-batch:{uuid.uuid4()}", 0)


def task_identity(job: JobIdentity, *, partition_id: int, local_property: dict[str, str | None]) -> tuple[str, int]:
    """(Producer-Id, Producer-Epoch) of one write task; ``local_property`` is the task's local properties."""
    base = job.base
    epoch = job.epoch
    if job.streaming:
        query_id = local_property.get(QUERY_ID_PROPERTY)
        if not job.explicit and query_id:
            base = f"spark-query:{query_id}"
        batch_id = local_property.get(BATCH_ID_PROPERTY)
        if batch_id is None or not batch_id.isdigit():
            raise IdentityError(
                f"the durable_streams sink could not read the micro-batch id (task local property "
                f"{BATCH_ID_PROPERTY!r}) that becomes the Producer-Epoch; this Spark version does not pass it "
                "to Python writers, so exactly-once streaming writes are not possible here"
            )
        epoch = int(batch_id)
    if base is None:
        raise IdentityError(
            "the durable_streams sink could not derive a stable producer identity (no streaming query id in "
            f"the task's local property {QUERY_ID_PROPERTY!r} nor in the checkpoint's metadata): set option "
            "'producerId' to a name that stays the same when this query restarts from its checkpoint"
        )
    assert epoch is not None
    return f"{base}:{partition_id}", epoch


def _query_id_from_checkpoint(location: str | None) -> str | None:
    """``StreamingQuery.id`` from ``<checkpointLocation>/metadata``, when it is a local path that exists.

    Only a fallback: the task's local property carries the same id on every filesystem.
    """
    if not location:
        return None
    path = location.removeprefix("file://").removeprefix("file:")
    try:
        with open(os.path.join(path, "metadata"), encoding="utf-8") as handle:
            value = json.loads(handle.readline()).get("id")
    except (OSError, ValueError, AttributeError):
        return None
    return str(value) if value else None
