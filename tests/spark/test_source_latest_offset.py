"""How fresh ``latestOffset`` is: right after a batch with data it looks at the tails again
(low latency for a live stream); while idle it reuses them for ``pollIntervalMs``."""

from __future__ import annotations

from servers import ServerProcess, session

from pyspark_durable_streams._source.first_batch import with_first_start
from pyspark_durable_streams._source.schema_record import SCHEMA_KEY, schema_record
from pyspark_durable_streams.options import parse_read_options
from pyspark_durable_streams.source import DurableStreamsStreamReader, infer_schema


def test_tails_are_fresh_after_data_and_cached_while_idle(server: ServerProcess) -> None:
    url = server.stream_url("latest-offset")
    http = session()
    headers = {"Content-Type": "text/plain"}
    assert http.put(url, headers=headers).status_code == 201

    def append() -> str:
        response = http.post(url, headers=headers, data=b"m")
        assert response.status_code == 204
        return str(response.headers["Stream-Next-Offset"])

    options = parse_read_options({"url": url, "pollIntervalMs": "600000"})
    schema = infer_schema(options)
    reader = DurableStreamsStreamReader(options, schema)
    recorded = {SCHEMA_KEY: schema_record(schema)}  # (every offset records the query's schema)
    first_tail = append()
    start = reader.initialOffset()
    first = reader.latestOffset(start, None)
    incarnation = http.head(url).headers["Stream-Incarnation"]
    # (the first batch's end also keeps its start: ``_source.first_batch``)
    assert first == with_first_start({**recorded, url: {"offset": first_tail, "incarnation": incarnation}}, start)

    second_tail = append()
    second = reader.latestOffset(first, None)  # the last look found data: look again now
    assert second == {**recorded, url: {"offset": second_tail, "incarnation": incarnation}}

    assert reader.latestOffset(second, None) == second  # nothing new: idle from here
    append()
    assert reader.latestOffset(second, None) == second  # idle: the tails of 10 minutes ago stand
    reader.stop()
