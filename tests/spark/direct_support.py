"""Helpers of the direct-history-read tests: fill a stream, wait until it is in Delta, read it
with Spark both ways (from the Delta files and over HTTP) and compare."""

from __future__ import annotations

import json
from typing import Any

import requests
from pyspark.sql import SparkSession
from servers import session

FAST = ("--flush-interval-ms", "50", "--tail-cache-bytes", "0")
PLAN = {"Accept": "application/vnd.durable-streams.read-plan+json"}


def offset_at(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


def read_rows(spark: SparkSession, **options: str) -> list[tuple[Any, ...]]:
    reader = spark.read.format("durable_streams")
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = [tuple(row) for row in reader.load().collect()]
    return sorted(rows, key=lambda row: row[1])  # by offset: the stream's order


def flushed(url: str, count: int) -> bool:
    plan = session().get(url, params={"offset": "-1"}, headers=PLAN).json()
    return bool(plan["delta_end"] == offset_at(count))


def fill(http: requests.Session, url: str, content_type: str, messages: list[bytes], per_request: int = 7) -> None:
    assert http.put(url, headers={"Content-Type": content_type}).status_code == 201
    for at in range(0, len(messages), per_request):
        chunk = messages[at : at + per_request]
        if content_type == "application/json":
            body = b"[" + b",".join(chunk) + b"]"
            assert http.post(url, headers={"Content-Type": content_type}, data=body).status_code == 204
        else:
            for message in chunk:
                assert http.post(url, headers={"Content-Type": content_type}, data=message).status_code == 204


def same_both_ways(spark: SparkSession, url: str, *, per_partition: int = 9, **options: str) -> list[tuple[Any, ...]]:
    """Direct reads (local files where visible, cut every ``per_partition`` messages where a row
    group may be split, and through the signed URLs) equal HTTP reads."""
    direct = read_rows(spark, url=url, historyReads="delta", messagesPerPartition=str(per_partition), **options)
    through_urls = read_rows(spark, url=url, historyReads="delta", localFiles="false", **options)
    over_http = read_rows(spark, url=url, historyReads="http", **options)
    assert direct == over_http
    assert through_urls == over_http
    return direct


def same_both_ways_between(
    spark: SparkSession, url: str, first: int, end: int, *, per_partition: int = 9
) -> list[tuple[Any, ...]]:
    """``same_both_ways`` of messages ``first … end - 1`` (starting and ending offsets)."""
    ranges = {
        "startingOffsets": json.dumps({url: offset_at(first)}),
        "endingOffsets": json.dumps({url: offset_at(end)}),
    }
    return same_both_ways(spark, url, per_partition=per_partition, **ranges)
