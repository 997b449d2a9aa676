"""One partition read three ways gives the same rows: Arrow (built column-wise), multipart
(row by row) and, for JSON, plain bodies. Run on executors' code directly: no SparkSession."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType, TimestampType
from servers import ServerProcess, append_all, session

from pyspark_durable_streams._source.task_reader import DataLossError, StreamRange, read_range
from pyspark_durable_streams.client import ReadFraming
from pyspark_durable_streams.options import parse_read_options
from pyspark_durable_streams.source import infer_schema

FRAMINGS: tuple[ReadFraming, ...] = ("arrow", "multipart")


def _offset(seq: int, within: int = 0) -> str:
    return f"{seq:016d}_{within:016d}"


def _read(url: str, schema: StructType, start: str, end: str, framing: ReadFraming) -> list[dict[str, Any]]:
    options = parse_read_options({"url": url})
    batches = list(read_range(options, schema, StreamRange(url, url, start, end, framing)))
    assert all(batch.schema.names == schema.fieldNames() for batch in batches)
    return [row for batch in batches for row in batch.to_pylist()]


def _create(url: str, content_type: str, messages: list[bytes]) -> None:
    http = session()
    assert http.put(url, headers={"Content-Type": content_type}).status_code == 201
    append_all(http, url, {"Content-Type": content_type}, messages)


def test_json_with_parsed_columns_is_the_same_in_every_framing(server: ServerProcess) -> None:
    url = server.stream_url("framings-json")
    messages = [b'{"n":1,"s":"a"}', b'{"n":"two"}', b"[3]", b'"x"', b'{"n":5,"s":null,"extra":{"k":1}}'] * 4
    _create(url, "application/json", [b"[" + message + b"]" for message in messages])  # one message each
    schema = StructType(
        [
            *infer_schema(parse_read_options({"url": url, "valueType": "string"})).fields,
            StructField("n", LongType(), True),
            StructField("s", StringType(), True),
        ]
    )
    rows = {framing: _read(url, schema, "-1", _offset(20), framing) for framing in (*FRAMINGS, "plain")}
    assert rows["arrow"] == rows["multipart"]
    assert [row["value"] for row in rows["arrow"]] == [message.decode() for message in messages]
    assert [row["offset"] for row in rows["arrow"]] == [_offset(seq) for seq in range(20)]
    assert [(row["n"], row["s"]) for row in rows["arrow"][:5]] == [
        (1, "a"),
        (None, None),
        (None, None),
        (None, None),
        (5, None),
    ]
    assert all(row["stream"] == url and row["content_type"] == "application/json" for row in rows["arrow"])
    assert all(row["timestamp"] is not None for row in rows["arrow"])
    # Plain bodies (the fallback for other servers) know offsets only at response edges.
    plain = rows["plain"]
    assert [row["value"] for row in plain] == [row["value"] for row in rows["arrow"]]
    assert [(row["n"], row["s"]) for row in plain] == [(row["n"], row["s"]) for row in rows["arrow"]]


@pytest.mark.parametrize(
    ("start", "end", "first_value", "seqs"),
    [
        (_offset(2), _offset(6), b"c" * 10, [2, 3, 4, 5]),
        (_offset(2, 4), _offset(6), b"c" * 6, [2, 3, 4, 5]),  # a start inside a message: the rest of it
        (_offset(2), _offset(6, 3), b"c" * 10, [2, 3, 4, 5, 6]),  # an end inside a message keeps it
    ],
)
def test_ranges_cut_exactly_in_every_framing(
    server: ServerProcess, start: str, end: str, first_value: bytes, seqs: list[int]
) -> None:
    url = server.stream_url("framings-bytes")
    _create(url, "application/octet-stream", [bytes([97 + i]) * 10 for i in range(10)])
    schema = infer_schema(parse_read_options({"url": url}))
    assert dict((f.name, f.dataType) for f in schema.fields)["value"] == BinaryType()
    rows = {framing: _read(url, schema, start, end, framing) for framing in FRAMINGS}
    assert rows["arrow"] == rows["multipart"]
    assert rows["arrow"][0]["value"] == first_value
    assert rows["arrow"][0]["offset"] == start
    assert [row["offset"] for row in rows["arrow"][1:]] == [_offset(seq) for seq in seqs[1:]]


def test_text_that_is_not_utf8_reads_with_replacement_characters(server: ServerProcess) -> None:
    url = server.stream_url("framings-text")
    _create(url, "text/plain", [b"caf\xc3\xa9", b"bad \xff byte", b"ok"])
    schema = StructType(
        [
            StructField("offset", StringType(), True),
            StructField("value", StringType(), True),
            StructField("timestamp", TimestampType(), True),
        ]
    )
    rows = {framing: _read(url, schema, "-1", _offset(3), framing) for framing in FRAMINGS}
    assert rows["arrow"] == rows["multipart"]
    assert [row["value"] for row in rows["arrow"]] == ["café", "bad \ufffd byte", "ok"]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_history_let_go_is_data_loss_without_boundaries_too(
    server: ServerProcess, fail_on_data_loss: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``410`` on a read without message boundaries: ``DataLossError`` naming the option, or
    (``failOnDataLoss=false``) the range from the earliest retained offset, the skip logged."""
    url = server.stream_url(f"framings-gone-{fail_on_data_loss}")
    messages = [f'{{"n":{n}}}'.encode() for n in range(20)]
    _create(url, "application/json", [b"[" + message + b"]" for message in messages])
    snapshot = session().put(f"{url}/snapshot/{_offset(10)}", headers={"Content-Type": "application/json"}, data=b"{}")
    assert snapshot.status_code == 204
    options = parse_read_options({"url": url, "failOnDataLoss": str(fail_on_data_loss).lower()})
    schema = infer_schema(parse_read_options({"url": url, "valueType": "string"}))
    part = StreamRange(url, url, _offset(2), _offset(15), "plain")
    if fail_on_data_loss:
        with pytest.raises(DataLossError, match=r"offset 0000000000000002_0000000000000000 .*failOnDataLoss=false"):
            list(read_range(options, schema, part))
        return
    with caplog.at_level(logging.WARNING, logger="pyspark_durable_streams.source"):
        rows = [row for batch in read_range(options, schema, part) for row in batch.to_pylist()]
    assert [row["value"] for row in rows] == [message.decode() for message in messages[10:15]]
    assert rows[0]["offset"] == _offset(10)
    assert "8 messages (0000000000000002_0000000000000000 up to 0000000000000010_0000000000000000)" in caplog.text
