"""Where a read starts and ends: every start and end kind resolved once from the options
(``_options.range_limits``), each bad input an error naming its option, and each kind applied to a
stream by the driver (``_source.range_offsets``) over a scripted transport: no Spark, no server."""

from __future__ import annotations

import json

import pytest
from client.fake_transport import FakeTransport, Reply
from driver_fakes import URL, driver_on, head

from pyspark_durable_streams._options.range_limits import (
    check_range,
    ending_offsets,
    resolve_end,
    resolve_start,
    starting_offsets,
)
from pyspark_durable_streams._source.range_offsets import StreamStart, end_offset, start_offset
from pyspark_durable_streams.client import Stream
from pyspark_durable_streams.client.time_lookup import OFFSET_FOR_TIME
from pyspark_durable_streams.options import (
    LATEST,
    EarliestStart,
    LatestEnd,
    LatestStart,
    OptionError,
    SnapshotStart,
    SpecificEnd,
    SpecificStart,
    StreamTimestampsStart,
    TimestampEnd,
    TimestampStart,
    parse_read_options,
)

OTHER = "http://fake.invalid:4437/v1/stream/other"
AT_3 = "0000000000000003_0000000000000000"
AT_5 = "0000000000000005_0000000000000000"
AT_9 = "0000000000000009_0000000000000000"


def lowered(**options: str) -> dict[str, str]:
    return {key.lower(): value for key, value in options.items()}


@pytest.mark.parametrize(
    ("options", "start"),
    [
        ({}, EarliestStart()),
        ({"startingOffsets": " Earliest "}, EarliestStart()),
        ({"startingOffsets": "LATEST"}, LatestStart()),
        ({"startingOffsets": "snapshot"}, SnapshotStart()),
        (
            {"startingOffsets": json.dumps({URL + "/": AT_3, OTHER: "latest"})},
            SpecificStart(((URL, AT_3), (OTHER, LATEST))),
        ),
        ({"startingOffsets": json.dumps({URL: -2, OTHER: "earliest"})}, SpecificStart(((URL, "-1"), (OTHER, "-1")))),
        ({"startingTimestamp": "1700000000000"}, TimestampStart(1_700_000_000_000, "error")),
        (
            {"startingTimestamp": "5", "startingOffsetsByTimestampStrategy": "Latest"},
            TimestampStart(5, "latest"),
        ),
        ({"startingOffsetsByTimestamp": json.dumps({URL: 7})}, StreamTimestampsStart(((URL, 7),), "error")),
        (
            {"startingOffsetsByTimestamp": json.dumps({URL: "7"}), "startingOffsetsByTimestampStrategy": "latest"},
            StreamTimestampsStart(((URL, 7),), "latest"),
        ),
    ],
)
def test_every_start_kind_is_resolved_from_its_option(options: dict[str, str], start: object) -> None:
    assert resolve_start(lowered(**options)) == start
    assert parse_read_options({"urls": f"{URL},{OTHER}", **options}).start == start


@pytest.mark.parametrize(
    ("options", "end"),
    [
        ({}, LatestEnd()),
        ({"endingOffsets": "latest"}, LatestEnd()),
        ({"endingOffsets": json.dumps({URL: AT_9})}, SpecificEnd(((URL, AT_9),))),
        ({"endingOffsets": json.dumps({URL: "LATEST"})}, SpecificEnd(((URL, LATEST),))),
        ({"endingTimestamp": "1700000005000"}, TimestampEnd(1_700_000_005_000)),
    ],
)
def test_every_end_kind_is_resolved_from_its_option(options: dict[str, str], end: object) -> None:
    assert resolve_end(lowered(**options)) == end
    assert parse_read_options({"urls": f"{URL},{OTHER}", **options}).end == end


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "soon"}, "option 'startingOffsets' must be earliest or latest or snapshot or a JSON"),
        ({"startingOffsets": "{}"}, "option 'startingOffsets' must be a non-empty JSON object of stream -> offset"),
        ({"startingOffsets": json.dumps({URL: None})}, "option 'startingOffsets': the offset of"),
        ({"startingOffsets": json.dumps({URL: "a/b"})}, "option 'startingOffsets': 'a/b' is not an offset"),
        ({"startingOffsets": json.dumps({URL: "x" * 257})}, "option 'startingOffsets': 'xxx"),
        ({"startingTimestamp": "soon"}, "option 'startingTimestamp' must be milliseconds since the epoch"),
        ({"startingOffsetsByTimestamp": "[5]"}, "option 'startingOffsetsByTimestamp' must be a non-empty JSON"),
        (
            {"startingOffsets": "latest", "startingOffsetsByTimestamp": json.dumps({URL: 5})},
            "options 'startingOffsets' and 'startingOffsetsByTimestamp' are mutually exclusive",
        ),
        (
            {"startingTimestamp": "5", "startingOffsetsByTimestamp": json.dumps({URL: 5})},
            "options 'startingTimestamp' and 'startingOffsetsByTimestamp' are mutually exclusive",
        ),
        (
            {"startingOffsets": "latest", "startingOffsetsByTimestampStrategy": "latest"},
            "option 'startingOffsetsByTimestampStrategy' needs 'startingTimestamp' or 'startingOffsetsByTimestamp'",
        ),
        (
            {"startingTimestamp": "5", "startingOffsetsByTimestampStrategy": "never"},
            "option 'startingOffsetsByTimestampStrategy' must be one of error, latest",
        ),
    ],
)
def test_a_bad_start_is_an_error_naming_its_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(")):
        resolve_start(lowered(**options))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endingOffsets": "earliest"}, "option 'endingOffsets' must be latest or a JSON object"),
        ({"endingOffsets": json.dumps({URL: "earliest"})}, "option 'endingOffsets' cannot use 'earliest' / -1"),
        ({"endingOffsets": json.dumps({URL: -2})}, "option 'endingOffsets' cannot use 'earliest' / -1"),
        ({"endingOffsets": json.dumps({URL: True})}, "option 'endingOffsets': the offset of"),
        ({"endingTimestamp": "-5"}, "option 'endingTimestamp' must be milliseconds since the epoch"),
        (
            {"endingOffsets": "latest", "endingTimestamp": "5"},
            "options 'endingOffsets' and 'endingTimestamp' are mutually exclusive",
        ),
    ],
)
def test_a_bad_end_is_an_error_naming_its_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        resolve_end(lowered(**options))


def test_start_and_end_are_checked_together_and_against_the_streams_read() -> None:
    with pytest.raises(
        OptionError, match=r"option 'startingTimestamp' \(9\) must not be after 'endingTimestamp' \(5\)"
    ):
        check_range(TimestampStart(9), TimestampEnd(5), [URL])
    check_range(TimestampStart(5), TimestampEnd(5), [URL])
    named = [
        (SpecificStart(((OTHER, AT_3),)), LatestEnd(), "startingOffsets"),
        (EarliestStart(), SpecificEnd(((OTHER, AT_3),)), "endingOffsets"),
        (StreamTimestampsStart(((OTHER, 5),)), LatestEnd(), "startingOffsetsByTimestamp"),
    ]
    for start, end, option in named:
        with pytest.raises(OptionError, match=f"option '{option}' names stream\\(s\\) that are not read: {OTHER}"):
            check_range(start, end, [URL])
        check_range(start, end, [URL, OTHER])
        check_range(start, end, [])  # a bucket subscription: its streams are not known yet


def test_the_parsers_are_the_option_tables_own() -> None:
    assert starting_offsets(" snapshot ", "startingOffsets") == SnapshotStart()
    assert ending_offsets("Latest", "endingOffsets") == LatestEnd()
    with pytest.raises(OptionError, match="option 'x' must be latest or a JSON object"):
        ending_offsets("now please", "x")


def lookup(offset: str | None, next_offset: str) -> Reply:
    body = {"timestamp": 5, "offset": offset, "next_offset": next_offset, "incarnation": "i-1"}
    return Reply(200, {"Content-Type": OFFSET_FOR_TIME}, json.dumps(body).encode())


def stream_over(*replies: Reply) -> tuple[FakeTransport, Stream]:
    transport = FakeTransport.script(*replies)
    return transport, driver_on(transport).stream(URL)


def test_starts_that_need_only_the_tail_ask_nothing() -> None:
    transport, stream = stream_over()
    assert start_offset(EarliestStart(), URL, AT_9, stream) == StreamStart("-1")
    assert start_offset(LatestStart(), URL, AT_9, stream) == StreamStart(AT_9)
    specific = SpecificStart(((OTHER, LATEST), (URL, AT_3)))
    assert start_offset(specific, URL, AT_9, stream) == StreamStart(AT_3)
    assert start_offset(specific, OTHER, AT_5, stream) == StreamStart(AT_5)
    assert start_offset(specific, "unnamed", AT_5, stream) == StreamStart("-1")
    unnamed = StreamTimestampsStart(((OTHER, 5),))
    assert start_offset(unnamed, URL, AT_9, stream) == StreamStart("-1")
    assert end_offset(LatestEnd(), URL, AT_9, stream) == AT_9
    assert end_offset(SpecificEnd(((URL, AT_3),)), URL, AT_9, stream) == AT_3
    assert end_offset(SpecificEnd(((URL, LATEST),)), URL, AT_9, stream) == AT_9
    assert end_offset(SpecificEnd(((OTHER, AT_3),)), URL, AT_9, stream) == AT_9
    assert transport.requests == []


def test_a_snapshot_start_asks_the_head_and_says_it_starts_at_the_snapshot() -> None:
    transport, stream = stream_over(Reply(200, {**head(AT_9).headers, "Stream-Snapshot-Offset": AT_3}), head(AT_9))
    assert start_offset(SnapshotStart(), URL, AT_9, stream) == StreamStart(AT_3, True)
    assert start_offset(SnapshotStart(), URL, AT_9, stream) == StreamStart("-1")
    assert [r.method for r in transport.requests] == ["HEAD", "HEAD"]


def test_times_ask_the_time_lookup_with_their_strategy() -> None:
    transport, stream = stream_over(lookup(AT_3, AT_9), lookup(None, AT_9), lookup(None, AT_9), lookup(AT_5, AT_9))
    assert start_offset(TimestampStart(5), URL, AT_9, stream) == StreamStart(AT_3)
    with pytest.raises(OptionError, match="option 'startingTimestamp': no message of stream"):
        start_offset(TimestampStart(5), URL, AT_9, stream)
    by_stream = StreamTimestampsStart(((URL, 5),), "latest")
    assert start_offset(by_stream, URL, AT_9, stream) == StreamStart(AT_9)
    assert end_offset(TimestampEnd(5), URL, AT_9, stream) == AT_5
    assert [r.method for r in transport.requests] == ["GET"] * 4


def test_a_time_after_every_message_names_the_option_of_the_kind() -> None:
    _, stream = stream_over(lookup(None, AT_9))
    with pytest.raises(OptionError, match="option 'startingOffsetsByTimestamp': no message of stream"):
        start_offset(StreamTimestampsStart(((URL, 5),)), URL, AT_9, stream)
