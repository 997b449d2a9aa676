"""Option parsing (``options.py``): values, defaults, and errors that name the option."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from pyspark_durable_streams.options import (
    CONNECTION_OPTIONS,
    READ_OPTIONS,
    TEST_HOOKS_ENV,
    WRITE_OPTIONS,
    ConnectionOptions,
    LatestEnd,
    OptionError,
    ReadOptions,
    SpecificStart,
    StreamTimestampsStart,
    TimestampEnd,
    TimestampStart,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from pyspark_durable_streams.source import DurableStreamsReader, DurableStreamsStreamReader

URL = "http://127.0.0.1:4437/v1/stream/a"


def test_the_names_each_direction_accepts() -> None:
    assert CONNECTION_OPTIONS == ("token", "authheader", "requesttimeoutms", "cacertfile")
    assert set(READ_OPTIONS) == {
        "path",
        "url",
        "urls",
        "server",
        "bucket",
        "prefix",
        "startingoffsets",
        "endingoffsets",
        "maxmessagespertrigger",
        "maxbytespertrigger",
        "failondataloss",
        "minpartitions",
        "messagesperpartition",
        "valuetype",
        "pollintervalms",
        "historyreads",
        "localfiles",
        "freezeworkergc",
        "startingtimestamp",
        "endingtimestamp",
        "startingoffsetsbytimestamp",
        "startingoffsetsbytimestampstrategy",
        "minmessagespertrigger",
        "maxtriggerdelay",
        "consumer",
        "filterpushdown",
    }
    assert set(WRITE_OPTIONS) == {
        "url",
        "path",
        "server",
        "bucket",
        "contenttype",
        "createstream",
        "ttlseconds",
        "closestream",
        "maxbatchbytes",
        "maxbatchmessages",
        "maxrequestsinflight",
        "deliverytimeoutms",
        "producerid",
        "producerepoch",
        "checkpointlocation",
        "queryname",
        "_testfailafterrequests",
        "freezeworkergc",
    }


def test_read_defaults_and_values() -> None:
    assert parse_read_options({"url": URL}) == ReadOptions(urls=(URL,))
    parsed = parse_read_options(
        {
            "URLS": f" {URL}/ , http://h/v1/stream/b",
            "startingOffsets": '{"http://h/v1/stream/b": "earliest", "' + URL + '": -2}',
            "endingOffsets": "LATEST",
            "maxMessagesPerTrigger": "10",
            "maxBytesPerTrigger": "2048",
            "failOnDataLoss": " False ",
            "minPartitions": "3",
            "messagesPerPartition": "50",
            "valueType": "JSON",
            "pollIntervalMs": "100",
            "token": " t0k ",
            "requestTimeoutMs": "1500",
            "caCertFile": " /ca.pem ",
        }
    )
    assert parsed == ReadOptions(
        urls=(URL, "http://h/v1/stream/b"),
        start=SpecificStart(((URL, "-1"), ("http://h/v1/stream/b", "-1"))),
        end=LatestEnd(),
        max_messages_per_trigger=10,
        max_bytes_per_trigger=2048,
        fail_on_data_loss=False,
        min_partitions=3,
        messages_per_partition=50,
        value_type="json",
        poll_interval_ms=100,
        connection=ConnectionOptions((("Authorization", "Bearer t0k"),), 1.5, "/ca.pem"),
    )
    timed = parse_read_options(
        {
            "url": URL,
            "startingOffsetsByTimestamp": '{"' + URL + '/": "1700000000000"}',
            "startingOffsetsByTimestampStrategy": "LATEST",
            "endingTimestamp": "1700000005000",
            "minMessagesPerTrigger": "20",
            "maxTriggerDelay": "1500ms",
        }
    )
    assert timed == ReadOptions(
        urls=(URL,),
        start=StreamTimestampsStart(((URL, 1_700_000_000_000),), "latest"),
        end=TimestampEnd(1_700_000_005_000),
        min_messages_per_trigger=20,
        max_trigger_delay_s=1.5,
    )
    assert parse_read_options({"url": URL}).max_trigger_delay_s == 15 * 60  # Kafka's default
    for text, seconds in (("250", 0.25), ("30s", 30), ("2 min", 120), ("1h", 3600)):
        options = {"url": URL, "minMessagesPerTrigger": "1", "maxTriggerDelay": text}
        assert parse_read_options(options).max_trigger_delay_s == seconds
    assert parse_read_options({"url": URL, "startingTimestamp": "0"}).start == TimestampStart(0)
    subscription = parse_read_options({"server": "http://h:1/", "bucket": "orders", "prefix": "eu/"})
    assert (subscription.server, subscription.bucket, subscription.prefix, subscription.subscription) == (
        "http://h:1",
        "orders",
        "eu/",
        True,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": URL, "colour": "red"}, "unknown read option(s) for format 'durable_streams': colour"),
        ({}, "name the streams to read: option 'url', 'urls', or 'server' + 'bucket'"),
        ({"url": URL, "urls": URL}, "options 'url' and 'urls' are mutually exclusive"),
        ({"url": "ftp://x"}, "option 'url' must hold full http(s) stream URLs, got 'ftp://x'"),
        ({"urls": f"{URL},{URL}"}, "option 'urls' names a stream twice"),
        ({"url": URL, "server": "http://h"}, "options 'url'/'urls' and 'server'/'bucket' are mutually exclusive"),
        ({"server": "h", "bucket": "orders"}, "option 'server' must be a base URL like http://host:4437, got 'h'"),
        ({"server": "http://h", "bucket": "A!"}, "option 'bucket' must match ^[a-z0-9_-]{4,64}$, got 'A!'"),
        ({"url": URL, "prefix": "p"}, "option 'prefix' needs 'server' + 'bucket'"),
        ({"url": URL, "startingOffsets": "soon"}, "option 'startingOffsets' must be earliest or latest or snapshot or"),
        ({"url": URL, "startingOffsets": "[]"}, "option 'startingOffsets' must be a non-empty JSON object"),
        ({"url": URL, "endingOffsets": "earliest"}, "option 'endingOffsets' must be latest or a JSON object"),
        ({"url": URL, "endingOffsets": '{"' + URL + '": -1}'}, "option 'endingOffsets' cannot use 'earliest' / -1"),
        ({"url": URL, "startingOffsets": '{"http://o": -1}'}, "option 'startingOffsets' names stream(s) that are"),
        ({"url": URL, "startingOffsets": '{"' + URL + '": true}'}, "option 'startingOffsets': the offset of"),
        ({"url": URL, "startingOffsets": '{"' + URL + '": "a b"}'}, "option 'startingOffsets': 'a b' is not an"),
        ({"url": URL, "valueType": "xml"}, "option 'valueType' must be one of binary, string, json, got 'xml'"),
        ({"url": URL, "failOnDataLoss": "maybe"}, "option 'failOnDataLoss' must be true or false, got 'maybe'"),
        ({"url": URL, "maxMessagesPerTrigger": "0"}, "option 'maxMessagesPerTrigger' must be a positive integer"),
        ({"url": URL, "minPartitions": "x"}, "option 'minPartitions' must be a positive integer, got 'x'"),
        ({"url": URL, "pollIntervalMs": "-5"}, "option 'pollIntervalMs' must be a positive integer, got '-5'"),
        ({"url": URL, "token": "a", "authHeader": "X: y"}, "options 'token' and 'authHeader' are mutually"),
        ({"url": URL, "token": " "}, "option 'token' must not be empty"),
        ({"url": URL, "authHeader": "novalue"}, "option 'authHeader' must look like 'Name: value'"),
        ({"url": URL, "requestTimeoutMs": "1.5"}, "option 'requestTimeoutMs' must be a positive integer, got '1.5'"),
        ({"url": URL, "caCertFile": ""}, "option 'caCertFile' must not be empty"),
        ({"url": URL, "startingTimestamp": "yesterday"}, "option 'startingTimestamp' must be milliseconds since"),
        ({"url": URL, "startingTimestamp": "-1"}, "option 'startingTimestamp' must be milliseconds since"),
        ({"url": URL, "endingTimestamp": str(2**53)}, "option 'endingTimestamp' must be milliseconds since"),
        ({"url": URL, "startingOffsetsByTimestamp": "{x"}, "option 'startingOffsetsByTimestamp' must be a JSON"),
        ({"url": URL, "startingOffsetsByTimestamp": "{}"}, "option 'startingOffsetsByTimestamp' must be a non-empty"),
        (
            {"url": URL, "startingOffsetsByTimestamp": '{"' + URL + '": "noon"}'},
            "option 'startingOffsetsByTimestamp': the timestamp of",
        ),
        (
            {"url": URL, "startingOffsetsByTimestamp": '{"http://o": 5}'},
            "option 'startingOffsetsByTimestamp' names stream(s) that are not read",
        ),
        (
            {"url": URL, "startingTimestamp": "5", "startingOffsets": "latest"},
            "options 'startingOffsets' and 'startingTimestamp' are mutually exclusive",
        ),
        (
            {"url": URL, "endingTimestamp": "5", "endingOffsets": "latest"},
            "options 'endingOffsets' and 'endingTimestamp' are mutually exclusive",
        ),
        (
            {"url": URL, "startingTimestamp": "5", "startingOffsetsByTimestampStrategy": "earliest"},
            "option 'startingOffsetsByTimestampStrategy' must be one of error, latest",
        ),
        (
            {"url": URL, "startingOffsetsByTimestampStrategy": "latest"},
            "option 'startingOffsetsByTimestampStrategy' needs 'startingTimestamp'",
        ),
        ({"url": URL, "minMessagesPerTrigger": "0"}, "option 'minMessagesPerTrigger' must be a positive integer"),
        ({"url": URL, "filterPushdown": "yes"}, "option 'filterPushdown' must be true or false, got 'yes'"),
        ({"url": URL, "maxTriggerDelay": "5s"}, "option 'maxTriggerDelay' needs option 'minMessagesPerTrigger'"),
        (
            {"url": URL, "minMessagesPerTrigger": "5", "maxTriggerDelay": "soon"},
            "option 'maxTriggerDelay' must be a duration like 500ms",
        ),
        (
            {"url": URL, "minMessagesPerTrigger": "50", "maxMessagesPerTrigger": "10"},
            "option 'minMessagesPerTrigger' (50) must not exceed 'maxMessagesPerTrigger' (10)",
        ),
        (
            {"url": URL, "minMessagesPerTrigger": "5", "maxTriggerDelay": "0s"},
            "option 'maxTriggerDelay' must be more than 0, got '0s'",
        ),
        (
            {"url": URL, "startingTimestamp": "6", "endingTimestamp": "5"},
            "option 'startingTimestamp' (6) must not be after 'endingTimestamp' (5)",
        ),
    ],
)
def test_read_errors_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as raised:
        parse_read_options(options)
    assert str(raised.value).startswith(message)


def test_write_defaults_and_values(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_write_options({"path": URL}) == WriteOptions(connection=ConnectionOptions(), url=URL)
    monkeypatch.setenv(TEST_HOOKS_ENV, "1")
    parsed = parse_write_options(
        {
            "server": " http://h ",
            "bucket": " orders ",
            "contentType": " application/json ",
            "createStream": "TRUE",
            "ttlSeconds": "60",
            "closeStream": "false",
            "maxBatchBytes": "100",
            "maxBatchMessages": "5",
            "maxRequestsInFlight": "2",
            "deliveryTimeoutMs": "2500",
            "producerId": " job ",
            "producerEpoch": "0",
            "checkpointLocation": " /ckpt ",
            "queryName": "q",
            "_testFailAfterRequests": "3",
            "authHeader": "X-Key : v ",
        }
    )
    assert parsed == WriteOptions(
        connection=ConnectionOptions((("X-Key", "v"),)),
        server="http://h",
        bucket="orders",
        content_type="application/json",
        create_stream=True,
        ttl_seconds=60,
        max_batch_bytes=100,
        max_batch_messages=5,
        max_requests_in_flight=2,
        delivery_timeout_s=2.5,
        producer_id="job",
        producer_epoch=0,
        checkpoint_location="/ckpt",
        test_fail_after_requests=3,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": URL, "speed": "1"}, "unknown write option(s) for format 'durable_streams': speed"),
        ({"url": URL, "path": URL + "x"}, "give the target stream once: option 'url' and save(path) disagree"),
        ({}, "the durable_streams sink needs exactly one target: option 'url' (one stream) or option 'server'"),
        ({"url": URL, "server": "http://h"}, "the durable_streams sink needs exactly one target"),
        ({"url": "h/v1/stream/a"}, "option 'url' must be an http:// or https:// URL, got 'h/v1/stream/a'"),
        ({"server": "h"}, "option 'server' must be an http:// or https:// URL, got 'h'"),
        ({"url": URL, "bucket": "orders"}, "option 'bucket' needs option 'server'"),
        ({"url": URL, "producerId": " "}, "option 'producerId' must not be empty"),
        ({"url": URL, "_testFailAfterRequests": "1"}, "option '_testFailAfterRequests' is a test hook: set"),
        ({"url": URL, "createStream": "yes"}, "option 'createStream' must be true or false, got 'yes'"),
        ({"url": URL, "closeStream": "1"}, "option 'closeStream' must be true or false, got '1'"),
        ({"url": URL, "ttlSeconds": "0"}, "option 'ttlSeconds' must be a positive integer, got '0'"),
        ({"url": URL, "maxBatchBytes": "1e3"}, "option 'maxBatchBytes' must be a positive integer, got '1e3'"),
        ({"url": URL, "maxBatchMessages": ""}, "option 'maxBatchMessages' must be a positive integer, got ''"),
        ({"url": URL, "maxRequestsInFlight": "0"}, "option 'maxRequestsInFlight' must be a positive integer"),
        ({"url": URL, "deliveryTimeoutMs": "-1"}, "option 'deliveryTimeoutMs' must be a positive integer"),
        ({"url": URL, "producerEpoch": "-1"}, "option 'producerEpoch' must be an integer between 0 and 2^53-1"),
        ({"url": URL, "producerEpoch": str(2**53)}, "option 'producerEpoch' must be an integer between 0 and"),
        ({"url": URL, "requestTimeoutMs": "0"}, "option 'requestTimeoutMs' must be a positive integer, got '0'"),
    ],
)
def test_write_errors_name_the_option(options: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TEST_HOOKS_ENV, raising=False)
    with pytest.raises(OptionError) as raised:
        parse_write_options(options)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("reader", "option", "value"),
    [(DurableStreamsReader, "consumer", "c"), (DurableStreamsStreamReader, "filterPushdown", "true")],
)
def test_an_option_the_read_would_ignore_is_refused(reader: type[Any], option: str, value: str) -> None:
    schema = StructType([StructField("value", BinaryType())])
    with pytest.raises(OptionError, match=f"option '{option}' applies to"):
        reader(parse_read_options({"url": URL, option: value}), schema)
