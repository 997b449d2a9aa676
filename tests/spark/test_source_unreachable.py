"""A read whose server does not answer says so, naming the URL (not "create the stream first")."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from servers import ServerProcess, free_port


def test_a_batch_read_with_the_server_down_names_the_url(spark: SparkSession) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/stream/orders"
    with pytest.raises(Exception) as error:  # load() HEADs the stream to choose the value column's type
        spark.read.format("durable_streams").options(url=url, requestTimeoutMs="2000").load().collect()
    text = str(error.value)
    assert "cannot reach the Durable Streams server" in text and url in text, text[:3000]
    assert "create the stream first" not in text


def test_a_missing_stream_still_says_to_create_it(spark: SparkSession, server: ServerProcess) -> None:
    url = server.stream_url("never-created")
    with pytest.raises(Exception) as error:
        spark.read.format("durable_streams").option("url", url).load()
    text = str(error.value)
    assert "404" in text and "create the stream first" in text and url in text, text[:3000]
