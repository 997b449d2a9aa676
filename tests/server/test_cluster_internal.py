"""A cluster shard server's internal endpoints and its cluster-internal credential, in this process.

The server is the subscriptions' home shard of two (``--cluster-shard k/2``) with bearer tokens
configured; its node's router is an address where nothing listens, so the other shard never
answers. The whole-cluster behaviour is ``tests/cluster/test_cluster_subscriptions.py``.
"""

from __future__ import annotations

from pathlib import Path

import requests
from inprocess import serving

from durable_streams_server import ServerConfig
from durable_streams_server.cluster.paths import shard_of_key
from durable_streams_server.cluster.shard.credential import CLUSTER_SECRET_HEADER
from durable_streams_server.protocol.tokens import parse_tokens

SECRET = "a-cluster-secret-of-enough-length-0123456789"
TOKEN = "0123456789abcdef-token"
JSON = {"Content-Type": "application/json"}


def _home_key(shards: int) -> str:
    """A first path segment whose shard is the base surface's subscriptions' home."""
    home = shard_of_key("v1/__ds", shards)
    return next(f"k{index}" for index in range(1000) if shard_of_key(f"v1/k{index}", shards) == home)


def test_internal_endpoints_answer_only_the_cluster(tmp_path: Path) -> None:
    home = shard_of_key("v1/__ds", 2)
    config = ServerConfig(
        data_dir=tmp_path / "data",
        auth=parse_tokens(f'[{{"name": "ops", "token": "{TOKEN}", "scope": "write"}}]', "test"),
        cluster_shard=f"{home}/2",
        cluster_router="http://127.0.0.1:9",
        cluster_secret=SECRET,
    )
    assert SECRET not in repr(config)
    inside = {CLUSTER_SECRET_HEADER: SECRET}
    with serving(config) as (url, _), requests.Session() as http:
        http.trust_env = False
        interest = f"{url}/v1/internal/interest"
        for headers in ({}, {CLUSTER_SECRET_HEADER: "wrong"}, {"Authorization": f"Bearer {TOKEN}"}):
            refused = http.get(interest, headers=headers)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN", refused.text
        current = http.get(interest, headers=inside)
        assert current.status_code == 200 and current.json()["patterns"] == [] and current.json()["paths"] == []
        # (a long-poll on the current version answers it again once its wait is over)
        waited = http.get(interest, params={"version": current.json()["version"], "wait_ms": "50"}, headers=inside)
        assert waited.json() == current.json()

        # the credential opens no public route: the stream surface wants a token, credential or not
        stream = f"{url}/v1/stream/{_home_key(2)}/jobs"
        token = {"Authorization": f"Bearer {TOKEN}"}
        assert http.put(stream, headers=JSON).status_code == 401
        for method, body in (("PUT", None), ("POST", b'{"n": 0}'), ("GET", None), ("DELETE", None)):
            refused = http.request(method, stream, data=body, headers=JSON | inside)
            assert refused.status_code == 401, (method, refused.text)
        assert http.put(stream, headers=JSON | token).status_code == 201
        # wake events (the home's deliveries to a stream of another shard) take the internal route
        wake = f"{url}/v1/internal/wake-events"
        producer = {"Producer-Id": "ds-wake-s-1", "Producer-Epoch": "3", "Producer-Seq": "0"}
        event = b'[{"type": "wake", "n": 1}]'
        params = {"path": f"{_home_key(2)}/jobs"}
        assert http.post(wake, params=params, data=event, headers=JSON | producer | token).status_code == 403
        assert http.post(wake, params=params, data=event, headers=JSON | producer | inside).status_code == 204
        again = http.post(wake, params=params, data=event, headers=JSON | producer | inside)
        assert again.status_code == 204  # (a repeat is the producer's duplicate: stored once)
        bad = http.post(wake, params=params, data=event, headers=JSON | inside)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_WAKE_EVENTS", bad.text
        read = http.get(stream, params={"offset": "-1"}, headers=token)
        assert read.json() == [{"type": "wake", "n": 1}], read.text
        matching = http.post(f"{url}/v1/internal/matching", json={"patterns": ["*/jobs"], "paths": []}, headers=inside)
        assert matching.status_code == 200, matching.text
        [(path, tail, created_ms)] = matching.json()["streams"]
        assert (path, tail, matching.json()["shard"]) == (f"{_home_key(2)}/jobs", 1, home) and created_ms > 0

        # reports: malformed ones are refused, one of another interest version is stale
        reports = f"{url}/v1/internal/reports"
        for body in ({}, {"shard": 0, "version": 1, "full": True, "streams": [], "removed": []}, [1]):
            bad = http.post(reports, json=body, headers=inside)
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_REPORT", bad.text
        stale = {"shard": 1 - home, "version": "old.1", "full": True, "streams": [], "removed": []}
        refused = http.post(reports, json=stale, headers=inside)
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "STALE_INTEREST"
        assert http.post(reports, json=stale | {"version": current.json()["version"]}, headers=inside).ok

        # a subscription is never created without the other shard's streams: it does not answer here
        sub = f"{url}/v1/stream/__ds/subscriptions/s"
        body = {"type": "pull-wake", "pattern": "*/jobs", "wake_stream": "w"}
        unavailable = http.put(sub, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert unavailable.status_code == 503 and unavailable.json()["error"]["code"] == "SHARD_UNAVAILABLE"
        assert unavailable.headers["Retry-After"] == "1"
        assert http.get(sub, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 404
        assert http.get(interest, headers=inside).json() == current.json()  # (nothing changed)


def test_a_server_outside_a_cluster_has_no_internal_endpoints(tmp_path: Path) -> None:
    with serving(ServerConfig(data_dir=tmp_path / "data")) as (url, _), requests.Session() as http:
        http.trust_env = False
        missing = http.get(f"{url}/v1/internal/interest", headers={CLUSTER_SECRET_HEADER: SECRET})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
