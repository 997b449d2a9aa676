"""Cold reads (history from Delta) answer what warm reads (memory) answered, from any offset --
a binary stream's with up to ``HISTORY_FACTOR`` times more after it (``engine.reads.read_body``),
each body exactly the stored bytes between its offsets -- and read about what they serve from
storage, however much the stream holds."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable

import requests
from servers import MotoServer, ServerProcess, flushed, read_all, session, wait_for

from durable_streams_server.engine.reads import HISTORY_FACTOR
from durable_streams_server.protocol.offsets import Offset, parse_offset

OCTETS = {"Content-Type": "application/octet-stream"}
JSON = {"Content-Type": "application/json"}
MIB = 1024 * 1024


def history_read_bytes(server: ServerProcess) -> float:
    text = requests.get(f"{server.url}/metrics", timeout=5).text
    return float(re.search(r"^durable_streams_history_read_bytes_total (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]


def compaction_passes(server: ServerProcess) -> int:
    return len(re.findall(r"msg=compacted ", server.log_text()))


def answers(http: requests.Session, url: str, offsets: list[Offset]) -> list[tuple[int, bytes, str]]:
    """One response per start offset: status, body and next offset."""
    found = []
    for offset in offsets:
        response = http.get(url, params={"offset": offset.encode()})
        found.append((response.status_code, response.content, response.headers.get("Stream-Next-Offset", "")))
    return found


def assert_extends(
    cold: list[tuple[int, bytes, str]], warm: list[tuple[int, bytes, str]], messages: list[bytes], offsets: list[Offset]
) -> None:
    """Each cold answer starts with the warm one and is the stored bytes between its offsets."""
    stored = b"".join(messages)

    def position(offset: Offset) -> int:
        return sum(len(message) for message in messages[: offset.seq]) + offset.within

    for offset, (status, body, end), (_, warm_body, _) in zip(offsets, cold, warm, strict=True):
        assert status == 200 and body.startswith(warm_body), offset
        assert body == stored[position(offset) : position(parse_offset(end))], offset


def test_cold_reads_match_warm_reads_from_any_offset_and_after_compaction(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """Small and large messages over several flushes (files with two streams' rows); reads
    start at every message and inside the large ones (sliced at 64 KiB)."""
    flags = ("--max-read-bytes", "65536", "--flush-interval-ms", "50", "--compaction-interval-s", "0")
    server = server_factory(*flags)
    http = session()
    url, other = server.stream_url("mixed"), server.stream_url("other")
    for each in (url, other):
        assert http.put(each, headers=OCTETS).status_code == 201
    rng = random.Random(7)
    messages = []
    for index in range(90):
        size = rng.choice([1, 17, 200, 3000]) if index % 9 else rng.choice([70_000, 150_000, 300_000])
        messages.append(rng.randbytes(size))
        assert http.post(url, headers=OCTETS, data=messages[-1]).status_code == 204
        assert http.post(other, headers=OCTETS, data=b"x" * rng.choice([5, 5000])).status_code == 204
        if index % 20 == 19:
            wait_for(flushed(server))
    wait_for(flushed(server))
    offsets = [Offset(seq) for seq in range(len(messages))]
    offsets += [Offset(seq, within) for seq in range(0, len(messages), 9) for within in (1, 65_536, 69_999)]
    warm = answers(http, url, offsets)
    assert [status for status, _, _ in warm] == [200] * len(offsets)
    assert warm[0][1] == b"".join(messages)[: len(warm[0][1])] and len(warm[0][1]) >= 60_000
    assert warm[len(messages)][1] == messages[0][1:65_537]  # inside a large message: a slice of it

    server.restart()  # nothing in memory: every read goes to Delta
    before = history_read_bytes(server)
    cold = answers(http, url, offsets)
    assert_extends(cold, warm, messages, offsets)
    assert max(len(body) for _, body, _ in cold) > 4 * 65_536  # (several read budgets: ``HISTORY_FACTOR``)
    assert history_read_bytes(server) > before
    assert answers(http, url, list(reversed(offsets))) == list(reversed(cold))  # parked cursors or not

    server.stop()
    server.extra_args = (*flags[:-1], "0.3")
    server.start()
    wait_for(lambda: compaction_passes(server) >= 2, timeout_s=30)
    assert_extends(answers(http, url, offsets), warm, messages, offsets)


def test_a_small_read_of_a_large_stream_reads_little_and_a_catch_up_reads_it_once(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """24 MiB in 1 MiB messages, flushed at most 4 MiB at a time (files of one row group each).
    The read of message 6 has 18 MiB after it, more than twice what it may read (as message 30
    of 48 MiB had: ``HISTORY_FACTOR`` 1 MiB budgets). The flusher runs every 100 ms and the
    test waits for it after every fourth message, so no commit holds more than 4 MiB (graceful
    restarts made those commits before, six of them, ~2-3 s each)."""
    server = server_factory("--flush-interval-ms", "100", "--compaction-interval-s", "0")
    http = session()
    url = server.stream_url("big")
    assert http.put(url, headers=OCTETS).status_code == 201
    rng = random.Random(3)
    stored = [rng.randbytes(MIB) for _ in range(24)]  # incompressible: bytes read are bytes stored
    for index, message in enumerate(stored):
        assert http.post(url, headers=OCTETS, data=message).status_code == 204
        if index % 4 == 3:
            wait_for(flushed(server))  # (a commit holds at most these four messages)
    server.restart()

    before = history_read_bytes(server)
    response = http.get(url, params={"offset": Offset(6).encode()})
    assert response.status_code == 200 and response.content == b"".join(stored[6 : 6 + HISTORY_FACTOR])
    one_read = history_read_bytes(server) - before
    # (what it serves, plus the start of the row group holding message 6 and the rest of the
    # last one, at most 4 MiB, plus the read buffer and footers; before: all 18 MiB after it)
    assert one_read < len(response.content) + 5 * MIB, f"a read of a 24 MiB stream read {one_read / MIB:.1f} MiB"

    server.restart()
    before = history_read_bytes(server)
    body = read_all(http, url)
    assert body == b"".join(stored)
    catch_up = history_read_bytes(server) - before
    assert catch_up < 1.1 * len(body), f"a catch-up of {len(body) / MIB:.0f} MiB read {catch_up / MIB:.1f} MiB"


def test_cold_reads_from_s3_match_warm_reads(server_factory: Callable[..., ServerProcess], moto: MotoServer) -> None:
    """The same seeking reads through the object store (moto's S3 server)."""
    moto.create_bucket("cold-reads")
    flags = ("--max-read-bytes", "65536", "--flush-interval-ms", "50", "--compaction-interval-s", "0")
    server = server_factory(*moto.server_args("s3://cold-reads/ds"), *flags)
    http = session()
    url = server.stream_url("remote")
    assert http.put(url, headers=OCTETS).status_code == 201
    rng = random.Random(5)
    messages = [rng.randbytes(rng.choice([40, 5000, 100_000])) for _ in range(30)]
    for index, message in enumerate(messages):
        assert http.post(url, headers=OCTETS, data=message).status_code == 204
        if index % 10 == 9:
            wait_for(flushed(server))
    offsets = [Offset(seq) for seq in range(len(messages))] + [Offset(seq, 1) for seq in range(len(messages))]
    warm = answers(http, url, offsets)
    server.restart()
    before = history_read_bytes(server)
    assert_extends(answers(http, url, offsets), warm, messages, offsets)
    assert history_read_bytes(server) > before
    assert read_all(http, url) == b"".join(messages)


def test_cold_json_reads_frame_what_warm_reads_frame_from_any_offset(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """A JSON stream's plain reads from Delta (``engine.reads.read_json_body``: each run's messages
    joined by Arrow) answer the arrays warm reads answered, from every offset; at the tail ``[]``;
    a read from Delta into the memory tail joins both kinds of run."""
    flags = ("--max-read-bytes", "65536", "--flush-interval-ms", "50", "--compaction-interval-s", "0")
    server = server_factory(*flags)
    http = session()
    url = server.stream_url("json")
    assert http.put(url, headers=JSON).status_code == 201
    rng = random.Random(11)
    messages: list[object] = []
    for post in range(40):
        batch = [
            {"n": len(messages) + i, "text": "é€" * rng.choice([0, 3, 400, 9000]), "list": [i, None, True]}
            for i in range(rng.choice([1, 5, 30]))
        ]
        body = json.dumps(batch if post % 3 else batch[0]).encode()
        assert http.post(url, headers=JSON, data=body).status_code == 204
        messages += batch if post % 3 else batch[:1]
        if post % 10 == 9:
            wait_for(flushed(server))
    wait_for(flushed(server))

    def read(offset: Offset) -> tuple[list[object], Offset]:
        response = http.get(url, params={"offset": offset.encode()})
        assert response.status_code == 200 and response.headers["Content-Type"].startswith("application/json")
        return response.json(), parse_offset(response.headers["Stream-Next-Offset"])

    offsets = [Offset(seq) for seq in range(len(messages) + 1)]
    warm = [read(offset) for offset in offsets]
    server.restart()  # nothing in memory: every read goes to Delta
    cold = [read(offset) for offset in offsets]
    for offset, (warm_items, _), (cold_items, end) in zip(offsets, warm, cold, strict=True):
        assert cold_items == messages[offset.seq : end.seq] and cold_items[: len(warm_items)] == warm_items, offset
    assert cold[-1] == ([], offsets[-1])
    assert http.get(url, params={"offset": offsets[-1].encode()}).content == b"[]"
    assert max(len(items) for items, _ in cold) >= 10

    tail = [{"n": len(messages) + i} for i in range(3)]
    assert http.post(url, headers=JSON, data=json.dumps(tail).encode()).status_code == 204
    start = Offset(len(messages) - 2)
    items, end = read(start)  # (two messages from Delta, three from memory)
    assert items == [*messages[-2:], *tail] and end == Offset(len(messages) + 3)
