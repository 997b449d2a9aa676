"""A source's side of forks in other shards, on one shard server: its export and its links.

The shard server runs as a node starts it (``--cluster-shard``, the cluster's credential in its
environment), and the test speaks the cluster-internal route to it as another shard's server
would (``cluster.shard.fork_copies``). Its links must count exactly as local forks do, however the
server's state was recovered: from Delta after a clean stop, and from the WAL after ``kill -9``
(a replayed delete soft-deletes the source only if its links were counted before the replay).
"""

from __future__ import annotations

from pathlib import Path

import requests
from cluster_support import JSON, name_in_shard
from servers import ServerProcess, session

from durable_streams_server.cluster.shard.export_frames import ExportReader
from durable_streams_server.settings import CLUSTER_SECRET_ENV

SECRET = {"Durable-Streams-Cluster-Secret": "s3cret"}


def _status(http: requests.Session, url: str) -> int:
    return http.get(url, params={"offset": "-1"}, timeout=30).status_code


def test_a_sources_links_count_as_forks_across_restarts(tmp_path: Path) -> None:
    args = ("--cluster-shard", "0/2", "--cluster-router", "http://127.0.0.1:9", "--flush-interval-ms", "50")
    server = ServerProcess(tmp_path / "shard", args, env={CLUSTER_SECRET_ENV: SECRET[next(iter(SECRET))]}).start()
    http = session()
    try:
        source = name_in_shard(0, 2, "src")
        url = server.stream_url(source)
        internal = f"{server.url}/v1/cluster/fork-links/v1/stream/{source}"
        assert http.put(url, headers=JSON, timeout=30).status_code == 201
        assert http.post(url, data=b'[{"n": 0}, {"n": 1}, {"n": 2}]', headers=JSON, timeout=30).status_code == 204

        link = {**SECRET, "Durable-Streams-Fork-Link": "l1", "Durable-Streams-Fork": "v1/stream/other/f"}
        for _ in range(2):  # (a repeated export registers the link once)
            answer = http.post(internal, headers={**link, "Stream-Fork-Sub-Offset": "0"}, timeout=30)
            assert answer.status_code == 200, answer.text
            reader = ExportReader(max_bytes=1 << 20)
            reader.feed(answer.content)
            meta, prefix, messages = reader.finish()
            assert (meta.name, meta.first_seq, meta.fork_seq, prefix) == (f"v1/stream/{source}", 0, 3, None)
            assert [message.replace(b" ", b"") for message in messages] == [b'{"n":0}', b'{"n":1}', b'{"n":2}']
        server.stop()  # the link is in Delta now

        server.extra_args = (*args[:4], "--flush-interval-ms", "600000")
        server.start()
        assert http.delete(url, timeout=30).status_code == 204
        assert _status(http, url) == 410  # the recovered link holds it, soft-deleted
        server.kill()  # the delete is in the WAL only

        server.start()
        assert _status(http, url) == 410  # replayed, with the link counted before the replay
        assert http.put(url, headers=JSON, timeout=30).status_code == 409
        assert http.delete(internal, params={"link": "l1"}, headers=SECRET, timeout=30).status_code == 204
        assert _status(http, url) == 404  # its last link gone, the source goes
        server.kill()

        server.start()
        assert _status(http, url) == 404  # (the unlink and the removal, replayed)
        assert http.put(url, headers=JSON, timeout=30).status_code == 201

        # an export asked for after its link was removed (the fork's side gave up on it) registers nothing
        assert http.delete(internal, params={"link": "late"}, headers=SECRET, timeout=30).status_code == 204
        late = http.post(internal, headers={**link, "Durable-Streams-Fork-Link": "late"}, timeout=30)
        assert (late.status_code, late.json()["error"]["code"]) == (409, "FORK_LINK_GONE")
        assert http.delete(url, timeout=30).status_code == 204
        assert _status(http, url) == 404  # (no link holds it)
    finally:
        server.kill()
