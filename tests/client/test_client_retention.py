"""The client's retention API against a real server: limits on create, in HEAD, changed, and the
``Gone`` a read below the earliest retained offset meets."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from servers import ServerProcess, wait_for

from pyspark_durable_streams.client import NO_LIMIT, Client, Gone, Retention


def test_limits_on_create_the_point_they_move_and_a_change(server_factory: Callable[..., ServerProcess]) -> None:
    server = server_factory("--flush-interval-ms", "50", "--compaction-interval-s", "0.3")
    with Client(server.url) as client:
        stream = client.stream("v1/stream/bounded")
        stream.create("text/plain", retention=Retention(max_messages=3, max_age_seconds=NO_LIMIT))
        meta = stream.metadata()
        assert meta.retention == Retention(max_messages=3)
        assert (meta.earliest_offset, meta.retained_bytes) == ("0000000000000000_0000000000000000", 0)
        for n in range(10):
            stream.append(f"m{n};")
        wait_for(lambda: stream.metadata().earliest_offset == "0000000000000007_0000000000000000", timeout_s=30)
        assert stream.metadata().retained_bytes == 9
        with pytest.raises(Gone) as gone, stream.read("-1") as reader:
            list(reader)
        assert gone.value.earliest_offset == "0000000000000007_0000000000000000"
        with stream.read(gone.value.earliest_offset) as reader:
            assert b"".join(message.data for message in reader) == b"m7;m8;m9;"

        assert stream.retention.change(Retention(max_messages=NO_LIMIT, max_bytes=4096)) == Retention(max_bytes=4096)
        assert stream.metadata().retention == Retention(max_bytes=4096)
        assert stream.retention.change(Retention(max_bytes=NO_LIMIT)) is None


@pytest.mark.parametrize(
    "bad", [{"max_bytes": 0}, {"max_messages": -1}, {"max_age_seconds": "forever"}, {"max_bytes": True}]
)
def test_a_bad_limit_is_refused_before_any_request(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Retention(**bad)  # type: ignore[arg-type]


def test_a_change_must_name_a_limit() -> None:
    with Client("http://127.0.0.1:9") as client, pytest.raises(ValueError, match="name at least one limit"):
        client.stream("v1/stream/x").retention.change(Retention())
