"""A streaming query restarted with another schema than its checkpoint recorded: added
columns continue it, a removed column, a changed type or another ``valueType`` fail with a
message naming the change (a real ``local[2]`` session, a real server, real checkpoints)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from servers import ServerProcess
from source_support import run_to_parquet

from pyspark_durable_streams.client import Client

BASE = "stream string, offset string, value string, n int"


def _read(spark: SparkSession, url: str, schema: str | None = None, **options: str) -> DataFrame:
    reader = spark.readStream.format("durable_streams").option("url", url)
    if schema is not None:
        reader = reader.schema(schema)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _rows_read(spark: SparkSession, df: DataFrame, out: Path, checkpoint: Path) -> int:
    query = run_to_parquet(df, out, checkpoint)
    return sum(p["numInputRows"] for p in query.recentProgress)


@pytest.fixture
def url(server: ServerProcess) -> str:
    url = server.stream_url("schemas")
    with Client(server.url) as client:
        stream = client.stream(url)
        stream.create("application/json")
        stream.append_json_batch([{"n": n, "name": f"m{n}"} for n in range(5)])
    return url


def _append(server: ServerProcess, url: str, first: int, count: int) -> None:
    with Client(server.url) as client:
        client.stream(url).append_json_batch([{"n": n, "name": f"m{n}"} for n in range(first, first + count)])


def test_added_columns_continue_and_other_changes_fail(
    spark: SparkSession, server: ServerProcess, url: str, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    assert _rows_read(spark, _read(spark, url, BASE), tmp_path / "a", checkpoint) == 5
    offsets = sorted((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    recorded = json.loads(offsets[-1].read_text().splitlines()[-1])[""]
    assert recorded == {"schema": [["stream", "string"], ["offset", "string"], ["value", "string"], ["n", "int"]]}

    _append(server, url, 5, 3)  # an added column continues the query from its checkpoint
    assert _rows_read(spark, _read(spark, url, f"{BASE}, name string"), tmp_path / "b", checkpoint) == 3
    rows = spark.read.parquet(str(tmp_path / "b" / "*.parquet")).collect()  # (files: its batch ids start at 1)
    assert sorted((r["n"], r["name"]) for r in rows) == [(n, f"m{n}") for n in range(5, 8)]

    _append(server, url, 8, 2)
    changed = {
        "stream string, offset string, value string, n string, name string": "column 'n' changed from int to string",
        "stream string, offset string, value string, name string": "column 'n' (int) was removed",
        "stream string, offset string, value binary, n int, name string": "column 'value' changed from string to "
        "binary (option valueType",
    }
    for schema, message in changed.items():
        with pytest.raises(Exception, match=re.escape(message)):
            _rows_read(spark, _read(spark, url, schema), tmp_path / "c", checkpoint)
    # Back to a schema the checkpoint accepts, nothing was lost.
    assert _rows_read(spark, _read(spark, url, f"{BASE}, name string"), tmp_path / "b", checkpoint) == 2


def test_another_value_type_fails_the_restart(
    spark: SparkSession, server: ServerProcess, url: str, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    assert _rows_read(spark, _read(spark, url), tmp_path / "a", checkpoint) == 5  # value: string, inferred
    _append(server, url, 5, 1)
    with pytest.raises(Exception, match=r"column 'value' changed from string to binary \(option valueType"):
        _rows_read(spark, _read(spark, url, valueType="binary"), tmp_path / "b", checkpoint)
    assert _rows_read(spark, _read(spark, url, valueType="json"), tmp_path / "b", checkpoint) == 1  # still a string
