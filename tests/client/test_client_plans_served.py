"""Read plans, the framing probe and planned files against real servers: our server plans a
flushed range and serves its files to ``Client.open_file`` (with a token that the file
requests never carry); the reference server offers no plans and plain framing."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from client_support import unique
from security_support import new_token, write_tokens
from servers import ServerProcess, wait_for

from pyspark_durable_streams.client import Client, PlansUnavailable

MESSAGES = [f'{{"n":{n}}}'.encode() for n in range(12)]


def offset_at(seq: int) -> str:
    return f"{seq:016d}_{0:016d}"


def test_our_server_plans_a_flushed_range_and_serves_its_files(tmp_path: Path) -> None:
    token = new_token("plans")
    tokens = write_tokens(
        tmp_path / "tokens.json", [{"name": "plans", "token": token, "scope": "write", "prefixes": ["v1/stream/"]}]
    )
    args = ["--flush-interval-ms", "50", "--tail-cache-bytes", "0", "--auth-tokens-file", str(tokens)]
    server = ServerProcess(tmp_path / "data", args).start()
    try:
        with Client(server.url, token=token) as client:
            stream = client.stream(f"v1/stream/{unique('plans')}")
            stream.create("application/json")
            stream.append_many(MESSAGES)
            assert stream.read_framing(stream.metadata().next_offset) == "arrow"
            wait_for(lambda: stream.read_plan("-1").delta_end == offset_at(len(MESSAGES)))
            plan = stream.read_plan(offset_at(2), end=offset_at(9))
            assert (plan.start, plan.end, plan.content_type) == (offset_at(2), offset_at(9), "application/json")
            (segment,) = plan.segments
            assert (segment.first_seq, segment.end_seq) == (2, 9) and segment.files
            rows = []
            for planned in segment.files:
                assert planned.url.startswith(f"{server.url}/v1/files/")
                with client.open_file(planned.url, planned.size) as file:
                    table = pq.ParquetFile(file).read(columns=["stream_uid", "kind", "seq", "data"])
                kind = table["kind"].cast("string")
                mine = pc.and_(pc.equal(table["stream_uid"], segment.stream_uid), pc.equal(kind, "message"))
                rows += table.filter(mine).to_pylist()
        data = {row["seq"]: row["data"] for row in rows if 2 <= row["seq"] < 9}
        assert data == {seq: MESSAGES[seq] for seq in range(2, 9)}
    finally:
        server.kill()


def test_the_reference_server_has_no_plans_and_plain_framing(reference: str) -> None:
    with Client(reference) as client:
        stream = client.stream(f"v1/stream/{unique('plain')}")
        stream.create("application/json")
        stream.append_json_batch([1, 2])
        assert stream.read_framing(stream.metadata().next_offset) == "plain"
        with pytest.raises(PlansUnavailable):
            stream.read_plan("-1")
