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
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
import requests
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

WRITERS = 32
RACE_S = 10.0


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[int, str] = field(default_factory=dict)
    """Offset each acknowledged append named -> its message."""
    doubly_acked: list[int] = field(default_factory=list)
    refusals: int = 0
    bad_refusals: list[tuple[int, int, int]] = field(default_factory=list)
    """(named, refused offset, the highest acknowledged tail before the request): a 412 that named
    a tail at or below the one it refused, or below one already acknowledged when it was sent."""
    highest_named: int = 0
    highest_acked_tail: int = 0
    failures: list[str] = field(default_factory=list)


def _seq(token: str) -> int:
    return int(token.strip('"').split("_")[0])


def _writer(url: str, index: int, deadline: float, tally: Tally) -> None:
    http = session()
    known: int | None = None
    n = 0
    try:
        while time.monotonic() < deadline:
            if known is None or n % 16 == 0:  # mostly chained through ETags, now and then a HEAD
                known = _seq(http.head(url).headers["Stream-Next-Offset"])
            message = json.dumps(f"w{index}-{n}")
            with tally.lock:
                acked_before = tally.highest_acked_tail
            answer = http.post(url, data=message, headers={**JSON, "If-Match": quoted(known)}, timeout=30)
            n += 1
            if answer.status_code == 204:
                new_tail = _seq(answer.headers["ETag"])
                with tally.lock:
                    if known in tally.acked:
                        tally.doubly_acked.append(known)
                    tally.acked[known] = message
                    tally.highest_acked_tail = max(tally.highest_acked_tail, new_tail)
                if new_tail != known + 1:
                    tally.failures.append(f"ETag {new_tail} after an append at {known}")
                known = new_tail
            elif answer.status_code == 412:
                named = _seq(answer.headers["ETag"])
                if _seq(answer.headers["Stream-Next-Offset"]) != named:
                    tally.failures.append(f"412 headers disagree: {answer.headers}")
                with tally.lock:
                    tally.refusals += 1
                    tally.highest_named = max(tally.highest_named, named)
                    if named < acked_before or named <= known:
                        tally.bad_refusals.append((named, known, acked_before))
                known = named
            else:
                tally.failures.append(f"{answer.status_code}: {answer.text}")
                return
    except Exception as exc:  # (reported by the test)
        tally.failures.append(repr(exc))


def _read_messages(http: requests.Session, url: str) -> list[str]:
    messages: list[str] = []
    token = "-1"
    while True:
        answer = http.get(url, params={"offset": token})
        assert answer.status_code == 200, answer.text
        messages.extend(json.dumps(value) for value in answer.json())
        token = answer.headers["Stream-Next-Offset"]
        if answer.headers.get("Stream-Up-To-Date") == "true":
            return messages


def test_race_32_writers_one_winner_per_offset_no_lost_update(
    http: requests.Session, server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    url = new_stream(http, server, JSON)
    tally = Tally()
    deadline = time.monotonic() + RACE_S
    threads = [threading.Thread(target=_writer, args=(url, i, deadline, tally)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=RACE_S + 60)
    assert tally.failures == []
    stored = _read_messages(http, url)
    lost = [at for at, message in tally.acked.items() if at >= len(stored) or stored[at] != message]
    duplicates = len(stored) - len(set(stored))
    print(
        f"\nrace [{request.node.callspec.id}]: {WRITERS} writers, {len(tally.acked)} acknowledged, "
        f"{tally.refusals} refused (412), {len(stored)} stored, duplicates {duplicates}, lost {len(lost)}"
    )
    assert len(tally.acked) > WRITERS  # (the race ran)
    assert tally.refusals > 0  # (and writers did collide)
    assert tally.doubly_acked == []  # one winner per offset
    assert lost == []
    assert duplicates == 0
    assert len(stored) == len(tally.acked)  # nothing stored that was not acknowledged
    assert sorted(tally.acked) == list(range(len(stored)))  # every offset won exactly once
    assert tally.bad_refusals == []
    assert tally.highest_named <= len(stored)  # (every 412 named a tail the stream reached)
