"""``append_json`` / ``append_json_batch`` only append to JSON streams: on any other stream the
JSON text would be stored as opaque bytes (``[{"a":1}]`` in a text stream), so they refuse."""

from __future__ import annotations

import pytest
from client_support import unique

from pyspark_durable_streams.client import Client


@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream"])
def test_json_appends_refuse_a_stream_that_is_not_json(our_client: Client, content_type: str) -> None:
    url = f"v1/stream/{unique('not-json')}"
    our_client.stream(url).create(content_type)
    fresh = our_client.stream(url)  # knows nothing yet: it learns the content type with a HEAD
    with pytest.raises(ValueError, match=f"{content_type}.*not JSON.*append\\(\\)") as refused:
        fresh.append_json({"a": 1})
    assert url in str(refused.value)
    with pytest.raises(ValueError, match="not JSON"):
        fresh.append_json_batch([{"a": 1}, {"a": 2}])
    assert list(fresh.read("-1")) == []  # nothing stored
    fresh.append(b"plain bytes")  # the stream itself is fine
    assert [message.data for message in fresh.read("-1")] == [b"plain bytes"]


def test_json_appends_still_work_on_json_streams(our_client: Client) -> None:
    stream = our_client.stream(f"v1/stream/{unique('json')}")
    stream.create("application/json; charset=utf-8")
    stream.append_json({"a": 1})
    stream.append_json_batch([[1, 2], {"b": 2}])
    assert [message.json() for message in stream.read("-1")] == [{"a": 1}, [1, 2], {"b": 2}]
