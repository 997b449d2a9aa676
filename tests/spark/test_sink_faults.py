"""The sink's retry path against injected faults: every row lands exactly once."""

from __future__ import annotations

from fault_proxy import DROP_ANSWER, DROP_REQUEST, Fault, FaultProxy
from pyspark.sql import SparkSession
from servers import ServerProcess
from sink_support import read_json

from pyspark_durable_streams.client import Client


def test_sink_write_through_injected_faults_is_exactly_once(spark: SparkSession, server: ServerProcess) -> None:
    with Client(server.url) as client:
        client.stream("v1/stream/sink-faults").create("application/json")
    with FaultProxy(server.port) as proxy:
        faults = [Fault.status(503, retry_after=1), DROP_ANSWER, Fault.status(500), DROP_REQUEST, DROP_ANSWER]
        proxy.inject("POST", *faults)
        df = spark.range(0, 500, numPartitions=2).selectExpr("to_json(named_struct('n', id)) AS value")
        url = f"{proxy.url}/v1/stream/sink-faults"
        df.write.format("durable_streams").mode("append").option("url", url).save()
        assert proxy.pending() == 0
        assert sorted(proxy.faults_seen()) == sorted(fault.kind for fault in faults)
    assert sorted(row["n"] for row in read_json(server.stream_url("sink-faults"))) == list(range(500))
