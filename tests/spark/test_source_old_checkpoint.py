"""A query restarted from a checkpoint written before the source's start and end kinds were typed
resumes exactly: the offset log below is what that code wrote (its lines copied from a real
checkpoint, with the stream's URL and incarnation filled in), read here by a real ``local[2]``
query against a real server. A logged batch that was not committed is replayed over the same
range, a first batch from the start it carries, and the batches after it continue from the
logged end, writing the same offset format."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from string import Template

import pytest
from pyspark.sql import SparkSession
from servers import ServerProcess
from source_support import read_stream, run_to_parquet

from pyspark_durable_streams.client import Client

SCHEMA = (
    '[["stream", "string"], ["offset", "string"], ["value", "string"], ["content_type", "string"], '
    '["timestamp", "timestamp"]]'
)
BATCH_METADATA = (
    '{"batchWatermarkMs":0,"batchTimestampMs":1795938049666,"conf":{"spark.sql.streaming.stateStore.providerClass":'
    '"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider","spark.sql.dropDuplicates.'
    'deterministicKeyOrder.enabled":"true","spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion":"2",'
    '"spark.sql.streaming.stateStore.rocksdb.formatVersion":"5","spark.sql.streaming.queryEvolution.'
    'enableSourceEvolution":"false","spark.sql.streaming.stateStore.encodingFormat":"unsaferow","spark.sql.streaming.'
    'statefulOperator.useStrictDistribution":"true","spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion":'
    '"2","spark.sql.streaming.multipleWatermarkPolicy":"min","spark.sql.streaming.stateStore.rowChecksum.enabled":'
    '"false","spark.sql.streaming.statefulOperator.alwaysNullableOutput.enabled":"true","spark.sql.streaming.'
    'aggregation.stateFormatVersion":"2","spark.sql.function.protobufExtensions.enabled":"false","spark.sql.shuffle.'
    'partitions":"2","spark.sql.streaming.join.stateFormatVersion":"2","spark.sql.streaming.stateStore.compression.'
    'codec":"lz4","spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan":"false"}}'
)
FIRST_END = Template(
    '{"": {"schema": ' + SCHEMA + ', "first_start": {"$url": {"offset": "$start", "incarnation": "$incarnation"}}}, '
    '"$url": {"offset": "$end", "incarnation": "$incarnation"}}'
)
"""A first batch's end, carrying the start it was planned with."""
LATER_END = Template('{"": {"schema": ' + SCHEMA + '}, "$url": {"offset": "$end", "incarnation": "$incarnation"}}')
BARE_END = Template('{"": {"schema": ' + SCHEMA + '}, "$url": "$end"}')
"""A later end of a checkpoint from before offsets carried incarnations."""


def at(seq: int) -> str:
    return f"{seq:016d}_0000000000000000"


def write_checkpoint(checkpoint: Path, logged: list[str], committed: int) -> None:
    """Spark's files for a query that logged ``logged`` batch ends and committed the first ``committed``."""
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}, separators=(",", ":")))
    for batch, end in enumerate(logged):
        (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{BATCH_METADATA}\n{end}")
        if batch < committed:
            (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


@pytest.mark.parametrize(
    ("logged", "committed", "first_read"),
    [
        # batch 0 ([2, 5)) committed, batch 1 ([5, 7)) logged: batch 1 is replayed, then [7, 9) follows
        ([FIRST_END, LATER_END], 1, 5),
        # only the first batch logged: replayed from the start it carries (2), not from latest (9)
        ([FIRST_END], 0, 2),
        # batch 1's end without an incarnation (an older checkpoint still): read on from it alike
        ([FIRST_END, BARE_END], 1, 5),
    ],
)
def test_a_checkpoint_written_before_typed_starts_resumes_exactly(
    spark: SparkSession,
    server: ServerProcess,
    tmp_path: Path,
    logged: list[Template],
    committed: int,
    first_read: int,
) -> None:
    name = f"old-checkpoint-{len(logged)}-{committed}-{logged[-1] is BARE_END}"
    url = server.stream_url(name)
    with Client(server.url) as client:
        stream = client.stream(url)
        stream.create("application/json")
        stream.append_json_batch([{"n": n} for n in range(9)])
        incarnation = stream.metadata().incarnation
    assert incarnation is not None
    ends = [at(5), at(7)]
    texts = [
        end.substitute(url=url, start=at(2), end=ends[batch], incarnation=incarnation)
        for batch, end in enumerate(logged)
    ]
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    write_checkpoint(checkpoint, texts, committed)

    query = run_to_parquet(read_stream(spark, url=url, startingOffsets="latest"), out, checkpoint, timeout_s=90)
    finished = not query.isActive
    query.stop()
    assert finished, "Trigger.AvailableNow did not end"

    # (read by the files: the sink's own log starts at the first batch this run wrote, not at 0)
    rows = [row.asDict() for row in spark.read.parquet(str(out / "*.parquet")).collect()]
    assert sorted(json.loads(row["value"])["n"] for row in rows) == list(range(first_read, 9))
    assert sorted(row["offset"] for row in rows) == [at(n) for n in range(first_read, 9)]
    last = max(int(path.name) for path in (checkpoint / "offsets").iterdir() if path.name.isdigit())
    written = json.loads((checkpoint / "offsets" / str(last)).read_text().splitlines()[2])
    assert written == json.loads(LATER_END.substitute(url=url, end=at(9), incarnation=incarnation))
