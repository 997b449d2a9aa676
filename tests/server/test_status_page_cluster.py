"""The status page at a cluster node: one node of two shards on a local storage root, real
processes on loopback, and Debian's headless Chromium (``ui_browser``).

The node's router serves the page itself and relays ``/v1/status/...`` to the server of the
shard the ``shard`` parameter names (and ``/v1/consumers`` too); the page's cluster view lists
the shards and picks the one the other views show, and a stream's page follows it live through the node (relayed,
never redirected): every request the browser makes goes to the node it asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from cluster_support import JSON, name_in_shard, serving, start_node
from servers import ServerProcess, session, wait_for
from ui_browser import Browser

from durable_streams_server.cluster.paths import shard_of_path

pytestmark = pytest.mark.slow  # (as the other cluster tests: node, shard servers and a browser)

LIVE_BOUND_S = 2.0
LOAD_S = 30.0


@pytest.fixture
def http() -> Iterator[requests.Session]:
    with session() as s:
        yield s


def test_the_page_works_through_a_cluster_node(
    server_factory: Callable[..., ServerProcess], tmp_path: Path, http: requests.Session
) -> None:
    storage = ["--storage-uri", str(tmp_path / "root"), "--shards", "2", "--lease-ttl-s", "3"]
    node = start_node(server_factory, storage, "n0", tmp_path)
    wait_for(serving([node], 2), message=lambda: str(node.describe()), timeout_s=60)
    names = [name_in_shard(shard, 2, f"ui{shard}") for shard in (0, 1)]
    for name in names:
        url = f"{node.url}/v1/stream/{name}"
        assert http.put(url, data=b'[{"shard":"mine"}]', headers=JSON).status_code == 201

    for path in ("/ui", "/"):  # (the root leads to the status page too)
        page = http.get(f"{node.url}{path}", allow_redirects=False)
        assert page.status_code == 308 and page.headers["Location"] == "ui/", path
    assert http.get(f"{node.url}/").url == f"{node.url}/ui/"
    assert http.get(f"{node.url}/ui/app.js").headers["Content-Type"].startswith("text/javascript")
    assert http.post(f"{node.url}/ui/x").status_code == 405
    for shard, name in enumerate(names):
        listed = http.get(f"{node.url}/v1/status/streams", params={"shard": str(shard)}, allow_redirects=False)
        assert listed.status_code == 200, listed.text  # relayed: no redirect to the shard's server
        assert [row["name"] for row in listed.json()["streams"]] == [f"v1/stream/{name}"]
    refused = http.get(f"{node.url}/v1/status/streams", params={"shard": "2"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_SHARD"
    # a named consumer in a bucket (its progress and its streams in the bucket's shard)
    bucket = next(f"shelf{index}" for index in range(100) if shard_of_path(f"/shelf{index}", 2) == 1)
    assert http.put(f"{node.url}/{bucket}").status_code == 201
    assert http.put(f"{node.url}/{bucket}/items", data=b"[1,2,3]", headers=JSON).status_code == 201
    progress = {"offsets": {"items": "0000000000000001_0000000000000000"}}
    assert http.put(f"{node.url}/{bucket}/__ds/consumers/etl", json=progress).status_code == 200
    lags = http.get(f"{node.url}/v1/consumers", params={"shard": "1"}, allow_redirects=False)
    assert lags.status_code == 200, lags.text
    assert [(c["consumer"], c["stream"], c["lag_messages"]) for c in lags.json()["consumers"]] == [
        ("etl", f"{bucket}/items", 2)
    ]
    assert http.get(f"{node.url}/v1/consumers", params={"shard": "0"}).json() == {"consumers": []}

    with Browser(tmp_path / "chromium") as browser:
        browser.navigate(f"{node.url}/ui/#/cluster")
        browser.wait_for("document.querySelectorAll('#cluster-table tbody tr').length === 2", LOAD_S)
        assert "node n0" in browser.text("#cluster-note")
        browser.evaluate("document.querySelectorAll('#cluster-table tbody button')[1].click()")
        browser.wait_for("document.getElementById('cluster-note').innerText.endsWith('shard 1')", LOAD_S)
        browser.evaluate("location.hash = '#/streams'")
        browser.wait_for("document.querySelectorAll('#streams-table tbody tr').length === 2", LOAD_S)
        assert browser.text("#streams-table tbody").splitlines()[1].startswith(f"v1/stream/{names[1]}")
        browser.evaluate("location.hash = '#/consumers'")
        browser.wait_for("document.querySelectorAll('#consumers-table tbody tr').length === 1", LOAD_S)
        assert browser.text("#consumers-table tbody tr").split("\t")[:2] == ["etl", f"{bucket}/items"]

        browser.evaluate(f"location.hash = '#/stream/' + encodeURIComponent('v1/stream/{names[1]}')")
        browser.wait_for("document.getElementById('stream-live').innerText === 'following live'", LOAD_S)
        browser.wait_for("document.querySelectorAll('#messages li').length === 1", LOAD_S)
        appended = http.post(f"{node.url}/v1/stream/{names[1]}", data=b'{"live":true}', headers=JSON)
        assert appended.status_code == 204
        browser.wait_for("document.querySelectorAll('#messages li.new').length === 1", LIVE_BOUND_S)
        assert '"live": true' in browser.text("#messages li.new")
        foreign = [
            url for url in browser.requests if not url.startswith(node.url + "/") and not url.startswith("data:")
        ]
        assert foreign == []
        assert [error for error in browser.errors if not error.startswith("log (network)")] == []
