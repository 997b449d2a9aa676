"""A cluster node hands its shard servers their settings as data: JSON on the process's stdin,
never a rewritten command line. A shard server process is started before its settings are
known (it imports everything, then waits for them), and serves once given them; the secrets
it is given (the cluster credential, the tokens) are in neither its argv nor its environment."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from servers import free_port, wait_for

from durable_streams_server.cli import load_settings
from durable_streams_server.cluster.node.workers import (
    SHARD_SERVER_COMMAND,
    ShardServerSpec,
    send_settings,
    spawn_shard_server,
)
from durable_streams_server.cluster.shard.credential import CLUSTER_SECRET_HEADER
from durable_streams_server.settings import Settings
from durable_streams_server.settings_json import SettingsFormatError, settings_from_json, settings_to_json

SECRET = "a-cluster-secret-of-enough-length-0123456789"
TOKEN = "0123456789abcdef-token"
JSON_TYPE = {"Content-Type": "application/json"}


def _node_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A node's settings as its command line gives them: tokens, storage options, limits."""
    for name in [name for name in os.environ if name.startswith("DURABLE_STREAMS_")]:
        monkeypatch.delenv(name)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([{"name": "ops", "token": TOKEN, "scope": "write"}]))
    return load_settings(
        [
            "--cluster",
            "--storage-uri",
            str(tmp_path / "root"),
            "--data-dir",
            str(tmp_path / "node"),
            "--auth-tokens-file",
            str(tokens),
            "--storage-option",
            "AWS_REGION=eu-west-1",
            "--max-body-bytes",
            "4096",
            "--long-poll-timeout-ms",
            "2s",
            "--shards",
            "3",
            "--take-over",
            "force",
            "--log-format",
            "json",
        ]
    )


def _spec(tmp_path: Path, base: Settings, shards: int = 1) -> ShardServerSpec:
    return ShardServerSpec("127.0.0.1", "http://127.0.0.1:9", tmp_path / "node", "n0", shards, base, secret=SECRET)


def test_settings_survive_their_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = _node_settings(tmp_path, monkeypatch)
    assert settings_from_json(settings_to_json(node)) == node
    shard = _spec(tmp_path, node).settings(0, "/r/shard-0000", 1234, take_over="ask", take_over_timeout_s=0.0)
    assert settings_from_json(settings_to_json(shard)) == shard
    assert shard.server.cluster_secret == SECRET and node.server.auth is not None
    assert TOKEN.encode() not in settings_to_json(shard)  # (the tokens go as their digests)


def test_a_shard_servers_settings_are_its_nodes_with_the_shards_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _node_settings(tmp_path, monkeypatch)
    shard = _spec(tmp_path, node, shards=3).settings(2, "/r/shard-0002", 1234, take_over="ask", take_over_timeout_s=0.0)
    assert (shard.server.cluster_shard, shard.server.cluster_router) == ("2/3", "http://127.0.0.1:9")
    assert (shard.server.storage_uri, shard.server.data_dir) == ("/r/shard-0002", tmp_path / "node/shards/0002")
    assert (shard.server.take_over, shard.server.take_over_timeout_s) == ("ask", 0.0)  # (the node's was force)
    assert (shard.server.advertise_url, shard.listen.port) == ("http://127.0.0.1:1234", 1234)
    assert (shard.cluster, shard.cluster_parent) == (None, os.getpid())
    unchanged = {"data_dir", "storage_uri", "take_over", "take_over_timeout_s", "advertise_url", "node_id"}
    unchanged |= {"cluster_shard", "cluster_router", "cluster_secret"}
    for field in dataclasses.fields(node.server):
        if field.name not in unchanged:
            assert getattr(shard.server, field.name) == getattr(node.server, field.name), field.name
    assert dataclasses.replace(shard.listen, port=node.listen.port) == node.listen
    assert shard.logs == node.logs
    with pytest.raises(ValueError, match="take_over must be one of no, ask, force, got 'maybe'"):
        _spec(tmp_path, node).settings(0, "/r", 1, take_over="maybe", take_over_timeout_s=0.0)


def test_a_shard_server_waits_for_its_settings_then_serves_with_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started before its settings are known (a warm spare would be), it has imported everything
    and listens nowhere; given them, it serves: the node's token, body limit and credential."""
    node = _node_settings(tmp_path, monkeypatch)
    port = free_port()
    settings = _spec(tmp_path, node).settings(0, str(tmp_path / "shard"), port, take_over="ask", take_over_timeout_s=0)
    spare = spawn_shard_server()
    try:
        wait_for(lambda: b"deltalake" in Path(f"/proc/{spare.pid}/maps").read_bytes(), timeout_s=60)  # (imported)
        assert spare.poll() is None
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
        send_settings(spare, settings)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _ready(url), timeout_s=60)

        assert Path(f"/proc/{spare.pid}/cmdline").read_bytes().split(b"\0")[:-1] == [
            part.encode() for part in SHARD_SERVER_COMMAND
        ]
        environment = Path(f"/proc/{spare.pid}/environ").read_bytes()
        assert SECRET.encode() not in environment and TOKEN.encode() not in environment

        stream = f"{url}/v1/stream/k/jobs"
        token = {"Authorization": f"Bearer {TOKEN}"}
        assert requests.put(stream, headers=JSON_TYPE, timeout=30).status_code == 401
        assert requests.put(stream, headers=JSON_TYPE | token, timeout=30).status_code == 201
        too_large = requests.post(stream, data=b"[" + b"1," * 2100 + b"1]", headers=JSON_TYPE | token, timeout=30)
        assert too_large.status_code == 413  # (the node's --max-body-bytes 4096)
        interest = f"{url}/v1/internal/interest"
        assert requests.get(interest, timeout=30).status_code == 403
        assert requests.get(interest, headers={CLUSTER_SECRET_HEADER: SECRET}, timeout=30).status_code == 200
    finally:
        spare.terminate()
        spare.wait(timeout=60)


def _ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/readyz", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "shard-server: no settings on stdin (its node ended before sending them)"),
        (b'{"format": 99}', "shard-server: expected a settings document of format 1, got format 99"),
        (b"[1, 2", "shard-server: not a usable settings document: JSONDecodeError: "),
    ],
)
def test_a_shard_server_without_usable_settings_exits_saying_why(payload: bytes, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "durable_streams_server", "shard-server"], input=payload, capture_output=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.decode().strip().startswith(message)


def test_a_settings_document_with_a_bad_value_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = json.loads(settings_to_json(_node_settings(tmp_path, monkeypatch)))
    document["server"]["max_body_bytes"] = 0
    with pytest.raises(SettingsFormatError, match="max_body_bytes must be greater than 0, got 0"):
        settings_from_json(json.dumps(document).encode())
