"""Spark through a cluster: the source and the sink given a cluster node's URL, whichever node
serves the streams (real nodes on loopback over one storage root, the shared ``local[2]`` session).

- a batch job writes two streams of different shards through one node and reads them back,
  one stream, a list and a bucket, with history read from every shard's own Delta files;
- a streaming query copies a stream into another while the node serving the target is killed
  with ``kill -9``: the sink's retries reach the shard's new server, and the target holds
  every message exactly once, in order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from cluster_support import JSON, name_in_shard, serving, start_node
from direct_support import read_rows
from pyspark.sql import SparkSession
from servers import ServerProcess, wait_for
from sink_support import read_json

from pyspark_durable_streams.client import Client

pytestmark = pytest.mark.slow

STORAGE = ("--shards", "2", "--lease-ttl-s", "2", "--durability", "delta", "--flush-interval-ms", "50")


def test_batch_write_and_read_through_a_node(
    spark: SparkSession, server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), *STORAGE]
    nodes = [start_node(server_factory, storage, f"n{index}", tmp_path) for index in range(2)]
    wait_for(serving(nodes, 2), timeout_s=60)
    front = nodes[0]
    urls = [f"{front.url}/v1/stream/{name_in_shard(shard, 2, 'spark')}" for shard in range(2)]
    for url in urls:
        rows = spark.range(300).selectExpr("CAST(id AS INT) AS n")
        rows.write.format("durable_streams").mode("append").option("url", url).option("createStream", "true").save()
        assert sorted(value["n"] for value in read_json(url)) == list(range(300))

    for url in urls:
        direct = read_rows(spark, url=url, historyReads="delta")
        assert direct == read_rows(spark, url=url, historyReads="http")
        assert sorted(json.loads(row[2])["n"] for row in direct) == list(range(300))
    both = read_rows(spark, urls=",".join(urls), historyReads="delta")
    assert len(both) == 600 and {row[0] for row in both} == set(urls)

    bucket = "spark-cluster"
    with Client(front.url) as client:
        client.bucket(bucket).create()
        for stream in ("a", "b"):
            client.bucket(bucket).stream(stream).create("application/json")
            client.bucket(bucket).stream(stream).append_json_batch([{"n": n} for n in range(5)])
    rows = read_rows(spark, server=nodes[1].url, bucket=bucket)
    assert sorted(row[0] for row in rows) == ["a"] * 5 + ["b"] * 5


def test_streaming_copy_is_exactly_once_across_a_failover(
    spark: SparkSession, server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), *STORAGE]
    nodes = [start_node(server_factory, storage, f"n{index}", tmp_path) for index in range(2)]
    wait_for(serving(nodes, 2), timeout_s=60)
    survivor, victim = nodes
    source_url = f"{survivor.url}/v1/stream/{name_in_shard(survivor.shards_held()[0], 2, 'copy-in')}"
    target_url = f"{survivor.url}/v1/stream/{name_in_shard(victim.shards_held()[0], 2, 'copy-out')}"
    assert requests.put(source_url, headers=JSON, timeout=30).status_code == 201
    assert requests.put(target_url, headers=JSON, timeout=30).status_code == 201
    with Client(source_url) as client:
        client.stream(source_url).append_json_batch([{"n": n} for n in range(100)])

    query = (
        spark.readStream.format("durable_streams")
        .option("url", source_url)
        .option("maxMessagesPerTrigger", "20")
        .load()
        .selectExpr("value")
        .writeStream.format("durable_streams")
        .option("url", target_url)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: len(read_json(target_url)) >= 20, timeout_s=120)
        victim.kill()
        with Client(source_url) as client:
            client.stream(source_url).append_json_batch([{"n": n} for n in range(100, 200)])
        wait_for(lambda: len(read_json(target_url)) >= 200, timeout_s=180)
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert [value["n"] for value in read_json(target_url)] == list(range(200))
    assert survivor.shards_held() == [0, 1]
