"""What the sink does when the user says little: the content type of the streams it creates, and
save modes.

Content type (no ``contentType`` option): the target stream's own when it exists; else the one
the ``durable_streams`` source recorded on its ``value`` column (all the streams it read share
it); else ``application/octet-stream`` with a ``value`` column, ``application/json`` without.
So ``readStream`` of a JSON stream into a new stream makes a JSON copy, one message per message.

Save modes: Spark itself refuses its default mode (``errorifexists``) and ``ignore`` for Python
data sources, suggesting "Append" or "Overwrite"; the sink refuses ``overwrite`` (a stream is
append-only) saying to use ``mode("append")``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from servers import ServerProcess
from sink_support import read_json

from pyspark_durable_streams.client import Client


def _content_type(url: str) -> str:
    with Client(url) as client:
        return client.stream(url).metadata().content_type


def _json_source(server: ServerProcess, name: str, count: int) -> str:
    url = server.stream_url(name)
    with Client(url) as client:
        client.stream(url).create("application/json")
        client.stream(url).append_json_batch([{"id": i} for i in range(count)])
    return url


def test_a_stream_read_from_a_json_stream_is_copied_as_json(
    spark: SparkSession, server: ServerProcess, tmp_path: Path
) -> None:
    source = _json_source(server, "orders", 5)
    copy = server.stream_url("orders-copy")
    events = spark.readStream.format("durable_streams").option("url", source).load()
    writer = events.writeStream.format("durable_streams").trigger(availableNow=True)
    query = writer.options(url=copy, createStream="true", checkpointLocation=str(tmp_path / "ckpt")).start()
    query.awaitTermination(120)
    assert query.exception() is None
    assert _content_type(copy) == "application/json"
    assert read_json(copy) == [{"id": i} for i in range(5)]  # one message per message, not one byte blob each

    batch_copy = server.stream_url("orders-batch-copy")
    frame = spark.read.format("durable_streams").option("url", source).load()
    assert frame.schema["value"].metadata == {"durable_streams.content_type": "application/json"}
    frame.where("value IS NOT NULL").select("value").write.format("durable_streams").mode("append").options(
        url=batch_copy, createStream="true"
    ).save()
    assert _content_type(batch_copy) == "application/json"
    assert read_json(batch_copy) == [{"id": i} for i in range(5)]


def test_an_existing_target_keeps_its_content_type_with_create_stream(
    spark: SparkSession, server: ServerProcess
) -> None:
    target = server.stream_url("existing-json")
    with Client(target) as client:
        client.stream(target).create("application/json")
    values = spark.createDataFrame([('{"n":1}',), ('{"n":2}',)], "value STRING").coalesce(1)
    values.write.format("durable_streams").mode("append").options(url=target, createStream="true").save()
    assert read_json(target) == [{"n": 1}, {"n": 2}]


def test_without_a_recorded_content_type_the_defaults_stay(spark: SparkSession, server: ServerProcess) -> None:
    url = server.stream_url("plain-values")
    spark.createDataFrame([("a",)], "value STRING").write.format("durable_streams").mode("append").options(
        url=url, createStream="true"
    ).save()
    assert _content_type(url) == "application/octet-stream"


def test_save_modes_other_than_append_say_to_use_append(spark: SparkSession, server: ServerProcess) -> None:
    url = _json_source(server, "modes", 1)
    rows = spark.range(2).selectExpr("id")
    with pytest.raises(Exception) as overwrite:
        rows.write.format("durable_streams").mode("overwrite").option("url", url).save()
    assert 'mode("append")' in str(overwrite.value) and "append-only" in str(overwrite.value)
    with pytest.raises(Exception) as default:  # Spark's own check, before the sink is asked
        rows.write.format("durable_streams").option("url", url).save()
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in str(default.value)
    assert read_json(url) == [{"id": 0}]  # nothing written by the refused jobs
