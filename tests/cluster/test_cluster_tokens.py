"""A cluster whose nodes all run with bearer tokens: what crosses shards is the cluster's own.

Three nodes as real processes over one local storage root, three shards, every node (and so
every shard server) with one ``--auth-tokens-file``. Client requests all go to one node
(``front``); the shard servers check the client's token (a fork needs write on itself and
read on its source, whatever shard the source is in), while what the shards send each other
through the routers (a fork's export and unlink, tail reports, wake events appended to
another shard's stream) goes to internal routes with the cluster secret instead; a client's
token, even an admin one, opens none of the internal routes, and the secret opens no public
one. Checked as a user meets it: copied forks
allowed and refused by token, a pull-wake subscription woken from two shards with its wake
stream in a third, and a copied fork's expiry unlinking it from its source as DELETE does.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from cluster_support import JSON, Node, name_in_shard, send, serving, start_node
from security_support import bearer, new_token, write_tokens
from servers import ServerProcess, wait_for

from durable_streams_server.cluster.paths import shard_of_key

pytestmark = pytest.mark.slow

SHARDS = 3
HOME = shard_of_key("v1/__ds", SHARDS)
"""The shard of the base surface's subscriptions."""
TOKENS = {name: new_token(name) for name in ("admin", "writer", "reader", "outsider")}
GRANTS: list[dict[str, object]] = [
    {"name": "admin", "token": TOKENS["admin"], "scope": "admin"},
    # write on forks and sources (a fork needs read on its source: write includes it)
    {"name": "writer", "token": TOKENS["writer"], "scope": "write", "prefixes": ["v1/stream/fork-", "v1/stream/src-"]},
    {"name": "reader", "token": TOKENS["reader"], "scope": "read"},
    # write on forks, nothing on sources
    {"name": "outsider", "token": TOKENS["outsider"], "scope": "write", "prefixes": ["v1/stream/fork-"]},
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Node]]:
    tmp = tmp_path_factory.mktemp("tokens")
    tokens = write_tokens(tmp / "tokens.json", GRANTS)
    storage = ["--storage-uri", str(tmp / "root"), "--shards", str(SHARDS), "--lease-ttl-s", "3"]
    storage += ["--auth-tokens-file", str(tokens)]
    started: list[ServerProcess] = []

    def factory(*args: str, data_dir: Path) -> ServerProcess:
        started.append(ServerProcess(data_dir, args).start())
        return started[-1]

    try:
        nodes = [start_node(factory, storage, f"n{index}", tmp) for index in range(SHARDS)]
        wait_for(serving(nodes, SHARDS), message=lambda: str([node.describe() for node in nodes]), timeout_s=60)
        yield nodes
    finally:
        for process in started:
            process.kill()


class Client:
    """One token's requests, all through one node; a 503 (a shard moving) is asked again."""

    def __init__(self, node: Node, token: str) -> None:
        self.base = f"{node.url}/v1/stream/"
        self.http = requests.Session()
        self.http.trust_env = False
        self.http.headers.update(bearer(TOKENS[token]))

    def send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return send(method, self.base + path, http=self.http, timeout=60, **kwargs)

    def status(self, method: str, path: str, **kwargs: Any) -> int:
        return self.send(method, path, **kwargs).status_code

    def create(self, path: str) -> None:
        answer = self.send("PUT", path, headers=JSON)
        assert answer.status_code == 201, answer.text

    def append(self, path: str, body: bytes, **headers: str) -> None:
        answer = self.send("POST", path, data=body, headers={**JSON, **headers})
        assert answer.status_code in (200, 204), answer.text

    def fork(self, path: str, source: str, **headers: str) -> requests.Response:
        given = {"Stream-Forked-From": f"/v1/stream/{source}", **{k.replace("_", "-"): v for k, v in headers.items()}}
        return self.send("PUT", path, headers={**JSON, **given})

    def read(self, path: str) -> list[Any]:
        answer = self.send("GET", path, params={"offset": "-1"})
        assert answer.status_code == 200, answer.text
        values: list[Any] = answer.json()
        return values


def _answers(client: Client, method: str, path: str, status: int) -> Callable[[], bool]:
    return lambda: client.status(method, path, params={"offset": "-1"}) == status


def _woken(reader: Client, wake_stream: str, path: str) -> Callable[[], bool]:
    """A wake event for ``path`` is in ``wake_stream``."""
    return lambda: path in {event["stream"] for event in reader.read(wake_stream)}


def _shards(front: Node) -> tuple[int, int]:
    """The two shards ``front`` does not hold: a source's and a fork's."""
    first, second = [shard for shard in range(SHARDS) if shard not in front.shards_held()]
    return first, second


def test_a_fork_of_another_shards_stream_is_the_tokens_to_make(cluster: list[Node]) -> None:
    front = cluster[0]
    source_shard, fork_shard = _shards(front)
    writer, reader, outsider = Client(front, "writer"), Client(front, "reader"), Client(front, "outsider")
    source, fork = name_in_shard(source_shard, SHARDS, "src-a"), name_in_shard(fork_shard, SHARDS, "fork-a")
    writer.create(source)
    writer.append(source, b'[{"n": 0}, {"n": 1}]')

    # write on the fork and read on the source: created, reading its source's messages, then its own
    forked = writer.fork(fork, source)
    assert forked.status_code == 201, forked.text
    writer.append(fork, b'{"n": 2}')
    assert [item["n"] for item in reader.read(fork)] == [0, 1, 2]
    assert [item["n"] for item in reader.read(source)] == [0, 1]
    assert writer.fork(fork, source).status_code == 200  # (a repeated PUT)

    # no read on the source (or no write on the fork): 403, and nothing is created anywhere
    other = name_in_shard(source_shard, SHARDS, "src-b")
    writer.create(other)
    writer.append(other, b'{"n": 0}')
    refused_fork = name_in_shard(fork_shard, SHARDS, "fork-b")
    for client in (outsider, reader):
        refused = client.fork(refused_fork, other)
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "FORBIDDEN"), refused.text
    assert reader.status("GET", refused_fork, params={"offset": "-1"}) == 404
    # the source holds no link: its DELETE removes it at once (404, free), as a source without forks
    assert writer.status("DELETE", other) == 204
    assert reader.status("GET", other, params={"offset": "-1"}) == 404
    writer.create(other)
    # while the allowed fork's link holds its source: soft-deleted (410), a re-create 409
    assert writer.status("DELETE", source) == 204
    assert reader.status("GET", source, params={"offset": "-1"}) == 410
    assert writer.status("PUT", source, headers=JSON) == 409
    assert [item["n"] for item in reader.read(fork)] == [0, 1, 2]
    assert writer.status("DELETE", fork) == 204
    wait_for(_answers(reader, "GET", source, 404), timeout_s=60)

    # the internal routes answer the cluster's credential only: a client's token, even admin, opens none
    admin = requests.Session()
    admin.trust_env = False
    admin.headers.update(bearer(TOKENS["admin"]))
    link = {"Durable-Streams-Fork-Link": "mine", "Durable-Streams-Fork": f"v1/stream/{fork}-x"}
    export = f"{front.url}/v1/cluster/fork-links/v1/stream/{other}"
    refusals = [
        admin.post(export, headers=link, timeout=30),
        admin.delete(export, params={"link": "mine"}, timeout=30),
        admin.get(f"{front.url}/v1/internal/interest", params={"shard": HOME}, timeout=30),
        admin.post(f"{front.url}/v1/internal/matching", params={"shard": source_shard}, json={}, timeout=30),
        admin.post(f"{front.url}/v1/internal/reports", params={"shard": HOME}, json={}, timeout=30),
    ]
    for refused in refusals:
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "FORBIDDEN"), refused.text
    # nor does a guessed credential stand in for a token
    guessed = {"Durable-Streams-Cluster-Secret": "guessed", "Content-Type": "application/json"}
    unauthenticated = requests.put(f"{writer.base}{other}-guess", headers=guessed, timeout=30)
    assert unauthenticated.status_code == 401, unauthenticated.text
    # (and the export refused made no link: the source still goes at once)
    assert writer.status("DELETE", other) == 204
    assert reader.status("GET", other, params={"offset": "-1"}) == 404


def test_a_subscription_spanning_shards_is_woken_through_the_clusters_credential(cluster: list[Node]) -> None:
    front = cluster[0]
    admin, reader = Client(front, "admin"), Client(front, "reader")
    # the pattern's streams in the home and one other shard, the wake stream in the third
    jobs = [f"{name_in_shard(shard, SHARDS, 'sub')}/jobs" for shard in (HOME, (HOME + 2) % SHARDS)]
    wake_stream = name_in_shard((HOME + 1) % SHARDS, SHARDS, "wake")
    for path in (*jobs, wake_stream):
        admin.create(path)
    sub = "__ds/subscriptions/tokens"
    body = {"type": "pull-wake", "pattern": "*/jobs", "wake_stream": wake_stream}
    created = admin.send("PUT", sub, json=body)
    assert created.status_code == 201, created.text
    assert reader.status("PUT", sub, json=body) == 403  # (managing subscriptions needs write)
    tokenless = requests.post(f"{admin.base}{wake_stream}", data=b"[]", headers=JSON, timeout=30)
    assert tokenless.status_code == 401, tokenless.text  # (the wake stream takes no append without a token)

    for n, path in enumerate(jobs):
        admin.append(path, b'{"n": %d}' % n)
        # the wake event reached the wake stream in the third shard (appended by the home with the
        # cluster's credential: no client token is involved), and a claim shows the stream pending
        wait_for(_woken(reader, wake_stream, path), timeout_s=60)
        claimed = admin.send("POST", f"{sub}/claim", json={"worker": "w1"})
        assert claimed.status_code == 200, claimed.text
        wake = claimed.json()
        assert [view["path"] for view in wake["streams"] if view["has_pending"]] == [path]
        acks = [{"stream": view["path"], "offset": view["tail_offset"]} for view in wake["streams"]]
        done = {"wake_id": wake["wake_id"], "generation": wake["generation"], "acks": acks, "done": True}
        acked = admin.send("POST", f"{sub}/ack", json=done, headers=bearer(wake["token"]))
        assert acked.status_code == 200, acked.text
    assert admin.status("DELETE", sub) == 204


def test_a_copied_forks_expiry_unlinks_it_from_its_source(cluster: list[Node]) -> None:
    front = cluster[0]
    source_shard, fork_shard = _shards(front)
    writer, reader = Client(front, "writer"), Client(front, "reader")
    source = name_in_shard(source_shard, SHARDS, "src-ttl")
    sliding, deadline = (name_in_shard(fork_shard, SHARDS, f"fork-{kind}") for kind in ("ttl", "at"))
    writer.create(source)
    writer.append(source, b'{"n": 0}')
    soon = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for fork, expiry in ((sliding, {"Stream_TTL": "1"}), (deadline, {"Stream_Expires_At": soon})):
        forked = writer.fork(fork, source, **expiry)
        assert forked.status_code == 201, forked.text

    assert writer.status("DELETE", source) == 204
    assert reader.status("GET", source, params={"offset": "-1"}) == 410  # (held by the forks' links)
    # each fork expires (HEAD does not renew a TTL) and its expiry removes its link, as DELETE does:
    # the source, soft-deleted, goes with the last of them and its path is free again
    for fork in (sliding, deadline):
        wait_for(_answers(reader, "HEAD", fork, 404), timeout_s=60)
    wait_for(_answers(reader, "GET", source, 404), timeout_s=60)
    writer.create(source)
    assert reader.read(source) == []
