"""Conditional appends (extension): ``If-Match: "<offset>"`` on a POST stores the append only if
the stream's tail is that offset (``protocol/preconditions.py``), on real servers in both
durability modes and with the fast path off too (a plain conditional append is served there by
the same handler).

- success answers ``ETag: "<new tail>"``, which the next conditional append names (no HEAD);
- a stale offset answers ``412 PRECONDITION_FAILED`` with ``ETag`` and ``Stream-Next-Offset`` of
  the current tail, and stores nothing (no message, no close, no ``Stream-Seq``);
- ``*``, anything but one quoted offset, and producer headers with ``If-Match`` are ``400``;
- the evaluation order: 404, closed (409), malformed precondition (400), content type and
  ``Stream-Seq`` (409), the precondition (412), the append;
- JSON (arrays flattened), binary and bulk appends alike;
- the race: 32 writers on one stream, each appending at the tail it last learned: one winner per
  offset, every acknowledged append stored exactly once at the offset it named, no lost update.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pyarrow as pa
import pytest
import requests
from conditional_race import check_race, run_race
from servers import ServerProcess, read_all, session

TEXT = {"Content-Type": "text/plain"}
JSON = {"Content-Type": "application/json"}
ARROW = "application/vnd.apache.arrow.stream"

MODES = {
    "wal": ("--durability", "wal"),
    "delta": ("--durability", "delta", "--flush-interval-ms", "20"),
    "wal-no-fast-path": ("--durability", "wal", "--fast-path", "off"),
}


@pytest.fixture(scope="module", params=list(MODES))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    mode = request.param
    process = ServerProcess(tmp_path_factory.mktemp(f"conditional-{mode}") / "data", MODES[mode]).start()
    yield process
    process.kill()


@pytest.fixture
def http() -> requests.Session:
    return session()


_names = iter(range(1_000_000))


def new_stream(http: requests.Session, server: ServerProcess, headers: dict[str, str] = TEXT, data: str = "") -> str:
    url = server.stream_url(f"conditional-{next(_names)}")
    assert http.put(url, headers=headers, data=data).status_code == 201
    return url


def offset(seq: int) -> str:
    return f"{seq:016d}_0000000000000000"


def quoted(seq: int) -> str:
    return f'"{offset(seq)}"'


def post(http: requests.Session, url: str, data: str | bytes, if_match: str | None, **extra: str) -> requests.Response:
    headers = {**TEXT, **({"If-Match": if_match} if if_match is not None else {}), **extra}
    return http.post(url, data=data, headers=headers)


def tail(http: requests.Session, url: str) -> str:
    return str(http.head(url).headers["Stream-Next-Offset"])


def code(response: requests.Response) -> str:
    return str(response.json()["error"]["code"])


# -- success and refusal --------------------------------------------------------------------


def test_a_conditional_append_at_the_tail_answers_the_new_tail_as_its_etag(
    http: requests.Session, server: ServerProcess
) -> None:
    url = new_stream(http, server)
    assert http.head(url).headers["Stream-Conditional-Append"] == "If-Match"
    first = post(http, url, "a", quoted(0))
    assert first.status_code == 204, first.text
    assert first.headers["ETag"] == quoted(1)
    assert first.headers["Stream-Next-Offset"] == offset(1)
    second = post(http, url, "b", first.headers["ETag"])  # chained: no HEAD
    assert second.status_code == 204, second.text
    assert second.headers["ETag"] == quoted(2)
    plain = post(http, url, "c", None)
    assert plain.status_code == 204 and "ETag" not in plain.headers  # (a plain append's answer is unchanged)
    assert read_all(http, url) == b"abc"


def test_a_stale_offset_is_412_naming_the_tail_and_stores_nothing(
    http: requests.Session, server: ServerProcess
) -> None:
    url = new_stream(http, server, data="x")
    refused = post(http, url, "y", quoted(0), **{"Stream-Closed": "true", "Stream-Seq": "0001"})
    assert refused.status_code == 412, refused.text
    assert code(refused) == "PRECONDITION_FAILED"
    assert offset(1) in refused.json()["error"]["message"]
    assert refused.headers["ETag"] == quoted(1)
    assert refused.headers["Stream-Next-Offset"] == offset(1)
    ahead = post(http, url, "y", quoted(5))  # (an offset past the tail is refused alike)
    assert ahead.status_code == 412 and ahead.headers["ETag"] == quoted(1)
    head = http.head(url)
    assert head.headers["Stream-Next-Offset"] == offset(1)
    assert "Stream-Closed" not in head.headers  # (the refused close did not happen)
    assert read_all(http, url) == b"x"
    # the refused Stream-Seq was not recorded either: the same seq is taken now
    accepted = post(http, url, "y", refused.headers["ETag"], **{"Stream-Seq": "0001"})
    assert accepted.status_code == 204, accepted.text
    assert read_all(http, url) == b"xy"


@pytest.mark.parametrize(
    "value",
    [
        "*",
        offset(0),  # unquoted
        f"W/{quoted(0)}",  # weak
        f"{quoted(0)}, {quoted(1)}",  # a list
        '"0"',  # not an offset
        '"-1"',
        '"now"',
        '""',
    ],
)
def test_a_malformed_or_unsupported_if_match_is_400(http: requests.Session, server: ServerProcess, value: str) -> None:
    url = new_stream(http, server)
    answer = post(http, url, "a", value)
    assert answer.status_code == 400, answer.text
    assert code(answer) == "INVALID_PRECONDITION"
    if value == "*":
        assert "not supported" in answer.json()["error"]["message"]
    assert tail(http, url) == offset(0)


def test_if_match_with_producer_headers_is_400(http: requests.Session, server: ServerProcess) -> None:
    url = new_stream(http, server)
    producer = {"Producer-Id": "p", "Producer-Epoch": "0", "Producer-Seq": "0"}
    answer = post(http, url, "a", quoted(0), **producer)
    assert answer.status_code == 400, answer.text
    assert code(answer) == "INVALID_PRECONDITION"
    assert "Producer-Id" in answer.json()["error"]["message"]
    assert tail(http, url) == offset(0)


# -- the evaluation order -------------------------------------------------------------------


def test_order_a_missing_stream_is_404_before_the_precondition(http: requests.Session, server: ServerProcess) -> None:
    url = server.stream_url("conditional-missing")
    assert post(http, url, "a", "*").status_code == 404
    assert post(http, url, "a", quoted(3)).status_code == 404


def test_order_a_closed_stream_is_409_before_the_precondition(http: requests.Session, server: ServerProcess) -> None:
    url = new_stream(http, server, data="x")
    closed = http.post(url, headers={"Stream-Closed": "true"})
    assert closed.status_code == 204
    for value in ("*", "bad", quoted(0), quoted(1)):
        answer = post(http, url, "y", value)
        assert answer.status_code == 409, (value, answer.text)
        assert code(answer) == "STREAM_CLOSED"
        assert answer.headers["Stream-Closed"] == "true"
        assert answer.headers["Stream-Next-Offset"] == offset(1)
    # a repeated close-only request is the idempotent close, whatever tail it names
    again = http.post(url, headers={"Stream-Closed": "true", "If-Match": quoted(0)})
    assert again.status_code == 204, again.text
    assert again.headers["Stream-Closed"] == "true"
    assert again.headers["ETag"] == quoted(1)
    assert read_all(http, url) == b"x"


def test_order_a_malformed_precondition_is_400_before_content_type_and_stream_seq(
    http: requests.Session, server: ServerProcess
) -> None:
    url = new_stream(http, server)
    assert post(http, url, "a", None, **{"Stream-Seq": "5"}).status_code == 204
    wrong_type = http.post(url, data="b", headers={"Content-Type": "application/json", "If-Match": "*"})
    assert wrong_type.status_code == 400 and code(wrong_type) == "INVALID_PRECONDITION"
    regression = post(http, url, "b", "nope", **{"Stream-Seq": "1"})
    assert regression.status_code == 400 and code(regression) == "INVALID_PRECONDITION"


def test_order_content_type_and_stream_seq_are_409_before_412(http: requests.Session, server: ServerProcess) -> None:
    url = new_stream(http, server)
    assert post(http, url, "a", None, **{"Stream-Seq": "5"}).status_code == 204
    wrong_type = http.post(url, data="b", headers={"Content-Type": "application/json", "If-Match": quoted(0)})
    assert wrong_type.status_code == 409 and code(wrong_type) == "CONTENT_TYPE_MISMATCH"
    regression = post(http, url, "b", quoted(0), **{"Stream-Seq": "1"})
    assert regression.status_code == 409 and code(regression) == "SEQUENCE_REGRESSION"
    stale = post(http, url, "b", quoted(0), **{"Stream-Seq": "6"})
    assert stale.status_code == 412
    assert read_all(http, url) == b"a"


def test_stream_closed_is_part_of_the_conditional_step(http: requests.Session, server: ServerProcess) -> None:
    url = new_stream(http, server)
    assert post(http, url, "a", quoted(0)).status_code == 204
    # close-only, stale: nothing happens; at the tail: closes
    stale = http.post(url, headers={"Stream-Closed": "true", "If-Match": quoted(0)})
    assert stale.status_code == 412 and stale.headers["ETag"] == quoted(1)
    assert "Stream-Closed" not in http.head(url).headers
    # append and close, at the tail: both
    closing = post(http, url, "b", quoted(1), **{"Stream-Closed": "true"})
    assert closing.status_code == 204, closing.text
    assert closing.headers["Stream-Closed"] == "true"
    assert closing.headers["ETag"] == quoted(2)
    assert http.head(url).headers["Stream-Closed"] == "true"
    assert read_all(http, url) == b"ab"
    other = new_stream(http, server, data="x")
    close_only = http.post(other, headers={"Stream-Closed": "true", "If-Match": quoted(1)})
    assert close_only.status_code == 204 and close_only.headers["ETag"] == quoted(1)
    assert close_only.headers["Stream-Closed"] == "true"


# -- JSON, binary, bulk ---------------------------------------------------------------------


def test_json_arrays_are_flattened_and_the_etag_counts_their_messages(
    http: requests.Session, server: ServerProcess
) -> None:
    url = new_stream(http, server, JSON)
    first = http.post(url, data="[1, 2, 3]", headers={**JSON, "If-Match": quoted(0)})
    assert first.status_code == 204, first.text
    assert first.headers["ETag"] == quoted(3)
    stale = http.post(url, data='{"a": 1}', headers={**JSON, "If-Match": quoted(1)})
    assert stale.status_code == 412 and stale.headers["ETag"] == quoted(3)
    second = http.post(url, data='{"a": 1}', headers={**JSON, "If-Match": first.headers["ETag"]})
    assert second.status_code == 204 and second.headers["ETag"] == quoted(4)
    assert json.loads(read_all(http, url)) == [1, 2, 3, {"a": 1}]


def test_binary_appends(http: requests.Session, server: ServerProcess) -> None:
    octets = {"Content-Type": "application/octet-stream"}
    url = new_stream(http, server, octets)
    payload = bytes(range(256)) * 300  # over the fast path's body limit too
    first = http.post(url, data=payload, headers={**octets, "If-Match": quoted(0)})
    assert first.status_code == 204 and first.headers["ETag"] == quoted(1)
    small = http.post(url, data=b"\x00\xff", headers={**octets, "If-Match": quoted(1)})
    assert small.status_code == 204 and small.headers["ETag"] == quoted(2)
    stale = http.post(url, data=b"\x01", headers={**octets, "If-Match": quoted(1)})
    assert stale.status_code == 412
    assert read_all(http, url) == payload + b"\x00\xff"


def _arrow(messages: list[bytes]) -> bytes:
    sink = io.BytesIO()
    schema = pa.schema([pa.field("data", pa.binary())])
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.record_batch([pa.array(messages, pa.binary())], schema=schema))
    return sink.getvalue()


def test_bulk_appends(http: requests.Session, server: ServerProcess) -> None:
    url = new_stream(http, server)
    bulk = {"Content-Type": ARROW, "Stream-Bulk-Content-Type": "text/plain"}
    first = http.post(url, data=_arrow([b"a", b"b", b"c"]), headers={**bulk, "If-Match": quoted(0)})
    assert first.status_code == 204, first.text
    assert first.headers["ETag"] == quoted(3)
    stale = http.post(url, data=_arrow([b"d"]), headers={**bulk, "If-Match": quoted(0)})
    assert stale.status_code == 412 and stale.headers["Stream-Next-Offset"] == offset(3)
    star = http.post(url, data=_arrow([b"d"]), headers={**bulk, "If-Match": "*"})
    assert star.status_code == 400
    assert read_all(http, url) == b"abc"


# -- the race -------------------------------------------------------------------------------


def test_race_32_writers_one_winner_per_offset_no_lost_update(
    http: requests.Session, server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    url = new_stream(http, server, JSON)
    summary = check_race(http, url, run_race(url))
    print(f"\nrace [{request.node.callspec.id}]: {summary}")
