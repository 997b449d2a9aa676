"""A subscription's backfill, and a restart's repair of its links, look at sleeping streams
without building them (``engine/stream_facts.py``): a server holding many streams asleep keeps
them so, whatever the pattern matches, and links each matching one at its tail."""

from __future__ import annotations

import re
from collections.abc import Callable

import requests
from servers import ServerProcess

LOOPBACK = ("--allow-private-webhook-urls", "127.0.0.0/8")
TEXT = {"Content-Type": "text/plain"}
NOWHERE = {"url": "http://127.0.0.1:9/hooks"}  # (nothing is pending: no delivery is attempted)


def _dormant(http: requests.Session, server: ServerProcess) -> int:
    metrics = http.get(f"{server.url}/metrics").text
    found = re.search(r"^durable_streams_streams_dormant (\S+)$", metrics, re.M)
    assert found is not None, "no durable_streams_streams_dormant gauge"
    return int(float(found.group(1)))


def _links(http: requests.Session, server: ServerProcess, sub_id: str) -> dict[str, str]:
    answer = http.get(server.stream_url(f"__ds/subscriptions/{sub_id}"))
    assert answer.status_code == 200, answer.text
    return {link["path"]: link["acked_offset"] for link in answer.json()["streams"]}


def test_a_subscription_over_sleeping_streams_builds_none_and_links_each_at_its_tail(
    server_factory: Callable[..., ServerProcess], http: requests.Session
) -> None:
    server = server_factory(*LOOPBACK)
    paths = [f"{group}/s{i}" for group in ("data", "other") for i in range(60)]
    for i, path in enumerate(paths):
        assert http.put(server.stream_url(path), headers=TEXT).status_code == 201
        for n in range(i % 4):  # (tails of 0 to 3 messages)
            assert http.post(server.stream_url(path), data=f"m{n}".encode(), headers=TEXT).status_code == 204
    server.restart()  # every stream asleep (dormant): nothing has looked one up since the restart
    assert _dormant(http, server) == len(paths)

    matching = {"type": "webhook", "pattern": "data/*", "webhook": NOWHERE}
    assert http.put(server.stream_url("__ds/subscriptions/some"), json=matching).status_code == 201
    none = {"type": "webhook", "pattern": "elsewhere/**", "webhook": NOWHERE}
    assert http.put(server.stream_url("__ds/subscriptions/none"), json=none).status_code == 201
    links = _links(http, server, "some")
    assert _links(http, server, "none") == {}
    assert _dormant(http, server) == len(paths)  # (the backfills and the reads of the links built none)

    server.restart()  # the restart repairs every subscription's links, looking at every stream again
    assert _links(http, server, "some") == links
    assert _dormant(http, server) == len(paths)

    # Each link is at its stream's tail (a HEAD builds the stream: last).
    tails = {path: http.head(server.stream_url(path)).headers["Stream-Next-Offset"] for path in paths[:60]}
    assert links == tails
    assert len({offset for offset in tails.values()}) == 4
